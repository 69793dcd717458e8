//! Little-endian integer readers over byte slices.

/// Little-endian u32 at byte `o` (the caller checked the length).
pub fn rd32(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}
/// Little-endian u64 at byte `o` (the caller checked the length).
pub fn rd64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}
