//! The key hashes of twemproxy (nutcracker) 0.5.0, bit for bit: the hash a
//! pool's `hash:` names turns a key's bytes into the 32-bit value that the
//! distribution places on the ring (`src/hashkit/` in twemproxy).
//!
//! One trap is kept on purpose: nutcracker reads the key through a signed
//! `char` in `fnv1_*`, `fnv1a_*` and `one_at_a_time`, so where `char` is
//! signed (x86-64: Debian's amd64 package) a byte ≥ 0x80 enters those hashes
//! sign-extended; [`signed`] does the same. (On arm64 Linux `char` is
//! unsigned and nutcracker places non-ASCII keys differently under those
//! hashes; md5 and murmur read unsigned bytes everywhere.)

/// A key hash that nutcracker's `hash:` directive can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hash {
    OneAtATime,
    Md5,
    Crc32,
    Crc32a,
    Fnv1_64,
    Fnv1a64,
    Fnv1_32,
    Fnv1a32,
    Murmur,
}

/// Every name nutcracker accepts, with ours when we implement it.
const NAMES: &[(&str, Option<Hash>)] = &[
    ("one_at_a_time", Some(Hash::OneAtATime)),
    ("md5", Some(Hash::Md5)),
    ("crc16", None),
    ("crc32", Some(Hash::Crc32)),
    ("crc32a", Some(Hash::Crc32a)),
    ("fnv1_64", Some(Hash::Fnv1_64)),
    ("fnv1a_64", Some(Hash::Fnv1a64)),
    ("fnv1_32", Some(Hash::Fnv1_32)),
    ("fnv1a_32", Some(Hash::Fnv1a32)),
    ("hsieh", None),
    ("murmur", Some(Hash::Murmur)),
    ("jenkins", None),
];

impl Hash {
    /// The hash a `hash:` value names; an error says whether nutcracker
    /// knows the name at all or only tagstore lacks it.
    pub fn from_name(name: &str) -> Result<Hash, String> {
        match NAMES.iter().find(|(n, _)| *n == name) {
            Some((_, Some(h))) => Ok(*h),
            Some((n, None)) => Err(format!(
                "hash {n:?} is valid for nutcracker but tagstore does not implement it; \
                 use md5 or murmur"
            )),
            None => Err(format!(
                "{name:?} is not a hash nutcracker knows (it accepts {})",
                NAMES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            )),
        }
    }

    /// The name as written in the configuration.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(_, h)| *h == Some(self))
            .map_or("?", |(n, _)| n)
    }

    /// The 32-bit hash of `key`, as nutcracker's `hash_<name>` returns it.
    pub fn hash(self, key: &[u8]) -> u32 {
        match self {
            Hash::OneAtATime => one_at_a_time(key),
            Hash::Md5 => md5_word(&md5(key), 0),
            Hash::Crc32 => (crc32fast::hash(key) >> 16) & 0x7fff,
            Hash::Crc32a => crc32fast::hash(key),
            Hash::Fnv1_64 => fnv1_64(key),
            Hash::Fnv1a64 => fnv1a_64(key),
            Hash::Fnv1_32 => fnv1_32(key),
            Hash::Fnv1a32 => fnv1a_32(key),
            Hash::Murmur => murmur(key),
        }
    }
}

/// A key byte as nutcracker's `(uint32_t) key[x]` sees it through a signed `char`.
fn signed(b: u8) -> u32 {
    b as i8 as i32 as u32
}

const FNV_64_INIT: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_64_PRIME: u64 = 0x0000_0100_0000_01b3;
const FNV_32_INIT: u32 = 2_166_136_261;
const FNV_32_PRIME: u32 = 16_777_619;

fn fnv1_64(key: &[u8]) -> u32 {
    let mut h = FNV_64_INIT;
    for &b in key {
        h = h.wrapping_mul(FNV_64_PRIME);
        h ^= b as i8 as i64 as u64;
    }
    h as u32
}

/// Not FNV-1a-64 at all: nutcracker truncates the offset basis and the
/// prime to 32 bits and runs a 32-bit FNV-1a with them. The truncated prime
/// (0x1b3) is so small that keys differing only in their last bytes land
/// close together, which is why the examples use md5 or murmur.
fn fnv1a_64(key: &[u8]) -> u32 {
    let mut h = FNV_64_INIT as u32;
    for &b in key {
        h ^= signed(b);
        h = h.wrapping_mul(FNV_64_PRIME as u32);
    }
    h
}

fn fnv1_32(key: &[u8]) -> u32 {
    let mut h = FNV_32_INIT;
    for &b in key {
        h = h.wrapping_mul(FNV_32_PRIME);
        h ^= signed(b);
    }
    h
}

fn fnv1a_32(key: &[u8]) -> u32 {
    let mut h = FNV_32_INIT;
    for &b in key {
        h ^= signed(b);
        h = h.wrapping_mul(FNV_32_PRIME);
    }
    h
}

fn one_at_a_time(key: &[u8]) -> u32 {
    let mut v: u32 = 0;
    for &b in key {
        v = v.wrapping_add(signed(b));
        v = v.wrapping_add(v << 10);
        v ^= v >> 6;
    }
    v = v.wrapping_add(v << 3);
    v ^= v >> 11;
    v.wrapping_add(v << 15)
}

/// MurmurHash2 with nutcracker's seed (`0xdeadbeef × length`), little-endian words.
fn murmur(key: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let len = key.len() as u32;
    let mut h = 0xdead_beef_u32.wrapping_mul(len) ^ len;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate().rev() {
            h ^= (b as u32) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// Word `i` (0..4) of an md5 digest, little-endian, as nutcracker's
/// `hash_md5` (word 0) and `ketama_hash` (word `alignment`) read it.
pub fn md5_word(d: &[u8; 16], i: usize) -> u32 {
    u32::from_le_bytes([d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]])
}

/// MD5 (RFC 1321) of `data`.
pub fn md5(data: &[u8]) -> [u8; 16] {
    const S: [u32; 16] = [7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21];
    // K[i] = floor(|sin(i + 1)| × 2^32), RFC 1321 §3.4.
    const K: [u32; 64] = [
        0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
        0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
        0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
        0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
        0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
        0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
        0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
        0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
        0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
        0xeb86d391,
    ];
    let mut st: [u32; 4] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476];
    // Padding: 0x80, zeros to 56 mod 64, then the bit length little-endian.
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64).wrapping_mul(8)).to_le_bytes());
    for block in msg.chunks_exact(64) {
        let mut m = [0u32; 16];
        for (w, c) in m.iter_mut().zip(block.chunks_exact(4)) {
            *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        let [mut a, mut b, mut c, mut d] = st;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let s = S[(i / 16) * 4 + i % 4];
            let t = a.wrapping_add(f).wrapping_add(K[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(t.rotate_left(s));
        }
        st = [
            st[0].wrapping_add(a),
            st[1].wrapping_add(b),
            st[2].wrapping_add(c),
            st[3].wrapping_add(d),
        ];
    }
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(st) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(d: &[u8]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn md5_rfc1321_vectors() {
        let v = [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        for (input, want) in v {
            assert_eq!(hex(&md5(input.as_bytes())), want, "md5({input:?})");
        }
        // Lengths around the padding boundary (55, 56, 63, 64 bytes).
        for n in [55, 56, 63, 64, 65, 119, 120] {
            assert_eq!(md5(&vec![b'x'; n]).len(), 16);
        }
        assert_eq!(hex(&md5(&[b'a'; 64])), "014842d480b571495a4a0363793f7367");
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_named() {
        for (n, h) in NAMES {
            match h {
                Some(h) => {
                    assert_eq!(Hash::from_name(n), Ok(*h));
                    assert_eq!(h.name(), *n);
                }
                None => assert!(Hash::from_name(n).unwrap_err().contains(n)),
            }
        }
        let e = Hash::from_name("sha1").unwrap_err();
        assert!(e.contains("\"sha1\"") && e.contains("murmur"), "{e}");
    }

    // Values printed by twemproxy 0.5.0's own src/hashkit/nc_*.c, compiled
    // unmodified with gcc on x86-64 (signed char) and called on each key.
    #[test]
    fn values_from_nutcracker_hashkit() {
        use Hash::*;
        let order = [
            Md5, Murmur, Fnv1_64, Fnv1a64, Fnv1_32, Fnv1a32, OneAtATime, Crc32, Crc32a,
        ];
        let table: &[(&str, [u32; 9])] = &[
            (
                "a",
                [
                    0xb975c10c, 0x4b41757c, 0x8601b7be, 0x8601ec8c, 0x050c5d7e, 0xe40c292c,
                    0xca2e9442, 0x000068b7, 0xe8b7be43,
                ],
            ),
            (
                "abc",
                [
                    0x98500190, 0x7b0cc428, 0x6bafadcb, 0x0541574b, 0x439c2f4b, 0x1a47e90b,
                    0xed131f5b, 0x00003524, 0x352441c2,
                ],
            ),
            (
                "foobar",
                [
                    0x22f65838, 0xabecff17, 0xa4dda9c2, 0xf73967e8, 0x31f0b262, 0xbf9cf968,
                    0xf952fde7, 0x00001ef6, 0x9ef61f95,
                ],
            ),
            (
                "o:6:isa_of:photo1",
                [
                    0xfabdbe5b, 0x0952866c, 0x0983161c, 0xd24521fa, 0x09495ddc, 0x3537919a,
                    0x4fd083e2, 0x00005543, 0x5543eab9,
                ],
            ),
            (
                "héllo",
                [
                    0x47e850be, 0xb83b73e8, 0xf6bc671e, 0xd512b0e0, 0x639c4a9e, 0xeb5e6740,
                    0x5bd53431, 0x00001e3b, 0x9e3b8236,
                ],
            ),
            (
                "日本語キー",
                [
                    0x6d0f9b6d, 0xd916e601, 0xc22e242d, 0xdc2f058d, 0x45bcaf2d, 0xe8025ecd,
                    0x98ebe695, 0x000028d8, 0x28d82d30,
                ],
            ),
            (
                "abcdefg",
                [
                    0x0f6cc67a, 0xeba746f2, 0x6c18206f, 0x17aa7737, 0xac46eaaf, 0x2a9eb737,
                    0x4ac70178, 0x0000312a, 0x312a6aa6,
                ],
            ),
        ];
        for (key, want) in table {
            for (h, w) in order.iter().zip(want) {
                assert_eq!(h.hash(key.as_bytes()), *w, "{}({key:?})", h.name());
            }
        }
        // Published values: FNV-1a 32 of "foobar", CRC-32 of "123456789".
        assert_eq!(fnv1a_32(b"foobar"), 0xbf9cf968);
        assert_eq!(Crc32a.hash(b"123456789"), 0xcbf43926);
    }

    #[test]
    fn signed_char_bytes_enter_sign_extended() {
        // With an unsigned char, fnv1a_32("\xff") would be (INIT ^ 0xff) × PRIME.
        let unsigned = (FNV_32_INIT ^ 0xff).wrapping_mul(FNV_32_PRIME);
        let signed_ext = (FNV_32_INIT ^ 0xffff_ffff).wrapping_mul(FNV_32_PRIME);
        assert_eq!(fnv1a_32(&[0xff]), signed_ext);
        assert_ne!(fnv1a_32(&[0xff]), unsigned);
        // ASCII is unaffected.
        assert_eq!(signed(b'a'), 0x61);
    }

    #[test]
    fn murmur_tail_lengths_differ() {
        // Every tail length (0..=3) takes its own branch; all distinct.
        let hs: Vec<u32> = (0..8).map(|n| murmur(&b"abcdefgh"[..n])).collect();
        for i in 0..hs.len() {
            for j in 0..i {
                assert_ne!(hs[i], hs[j]);
            }
        }
        // Empty key: seed 0, h = 0, the final mix keeps 0.
        assert_eq!(murmur(b""), 0);
    }
}
