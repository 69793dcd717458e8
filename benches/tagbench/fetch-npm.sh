#!/usr/bin/env bash
# Fetches the npm package `all-the-package-repos` (package name -> repository
# URL for every npm package) into the tagbench cache and derives from it:
#
#   npm.tsv        one tag per line, `<package>\towned_by\t<owner>`, in the
#                  root crate's TSV format (src/tsv.rs: backslash, tab,
#                  newline and carriage return escaped as \\ \t \n \r)
#   npm-names.txt  distinct account names, one per line, sorted
#
# Owners of a package (the package has no maintainers field, only the URL):
#   * the owner of its repository: the first path segment of the URL,
#     lowercased (GitHub, GitLab and Bitbucket names are case-insensitive);
#     a bare login for github.com, `host/login` for any other host
#   * its npm scope, `@scope`, when the package name is `@scope/name`
# Names: every GitHub login, every other host's login, every scope without
# its `@`, lowercased and deduplicated.
#
# Never committed: everything goes to ${TAGBENCH_CACHE:-$HOME/.cache/tagbench}.
# Idempotent: the download and each output are skipped when present (delete
# them, or pass --force, to redo). Needs npm, tar and python3.
set -euo pipefail

VERSION="${NPM_REPOS_VERSION:-2.0.3148}"
CACHE="${TAGBENCH_CACHE:-$HOME/.cache/tagbench}"
FORCE=0
if [[ "${1:-}" == "--force" ]]; then FORCE=1; fi

for tool in npm tar python3; do
    command -v "$tool" >/dev/null || { echo "fetch-npm.sh: $tool not found" >&2; exit 1; }
done

mkdir -p "$CACHE"
TGZ="$CACHE/all-the-package-repos-$VERSION.tgz"
JSON="$CACHE/all-the-package-repos-$VERSION/package/data/packages.json"
TSV="$CACHE/npm.tsv"
NAMES="$CACHE/npm-names.txt"
STAMP="$CACHE/npm.version"

if [[ $FORCE == 1 || ! -s "$TGZ" ]]; then
    echo "fetching all-the-package-repos@$VERSION into $CACHE"
    (cd "$CACHE" && npm pack --silent "all-the-package-repos@$VERSION" >/dev/null)
fi
[[ -s "$TGZ" ]] || { echo "fetch-npm.sh: npm pack did not produce $TGZ" >&2; exit 1; }

if [[ $FORCE == 1 || ! -s "$JSON" ]]; then
    rm -rf "$CACHE/all-the-package-repos-$VERSION"
    mkdir -p "$CACHE/all-the-package-repos-$VERSION"
    tar xzf "$TGZ" -C "$CACHE/all-the-package-repos-$VERSION" package/data/packages.json
fi

if [[ $FORCE == 0 && -s "$TSV" && -s "$NAMES" && "$(cat "$STAMP" 2>/dev/null)" == "$VERSION" ]]; then
    echo "up to date: $TSV ($(wc -l <"$TSV") tags), $NAMES ($(wc -l <"$NAMES") names), version $VERSION"
    exit 0
fi

python3 - "$JSON" "$TSV.tmp" "$NAMES.tmp" <<'EOF'
import json, re, sys
from collections import Counter

src, tsv_path, names_path = sys.argv[1:4]
with open(src, encoding="utf-8") as f:
    repos = json.load(f)

# scheme://[user@]host[:port]/owner/...   and scp-like git@host:owner/...
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/]*@)?([^/:?#]+)(?::\d*)?/+([^/?#]+)")
SCP = re.compile(r"^[^@/]+@([^/:]+):/*([^/?#]+)")

def esc(s):
    return (s.replace("\\", "\\\\").replace("\t", "\\t")
             .replace("\n", "\\n").replace("\r", "\\r"))

def repo_owner(url):
    m = URL.match(url) or SCP.match(url)
    if not m:
        return None
    host, login = m.group(1).lower(), m.group(2).lower()
    if host.startswith("www."):
        host = host[4:]
    if login.endswith(".git"):
        login = login[:-4]
    if not login or login in (".", ".."):
        return None
    return host, login

c = Counter()
names = set()
owners = Counter()
hosts = Counter()
with open(tsv_path, "w", encoding="utf-8", newline="\n") as out:
    for pkg, url in repos.items():
        c["packages"] += 1
        pairs = []
        if isinstance(url, str) and url:
            c["with repository"] += 1
            o = repo_owner(url)
            if o is None:
                c["repository URL without owner (skipped)"] += 1
            else:
                host, login = o
                hosts[host] += 1
                names.add(login)
                pairs.append(login if host == "github.com" else f"{host}/{login}")
        if pkg.startswith("@") and "/" in pkg:
            c["scoped"] += 1
            scope = pkg.split("/", 1)[0].lower()
            if len(scope) > 1:
                names.add(scope[1:])
                pairs.append(scope)
        if not pairs:
            c["packages without an owner"] += 1
        for owner in dict.fromkeys(pairs):
            owners[owner] += 1
            out.write(f"{esc(pkg)}\towned_by\t{esc(owner)}\n")
            c["tags"] += 1

names.discard("")
with open(names_path, "w", encoding="utf-8", newline="\n") as out:
    for n in sorted(names):
        if "\n" not in n and "\r" not in n:
            out.write(n + "\n")

for k, v in c.items():
    print(f"  {k:<42} {v:>10,}")
print(f"  {'distinct owners (tag subjects)':<42} {len(owners):>10,}")
print(f"  {'distinct names':<42} {len(names):>10,}")
print("  biggest owners: " + ", ".join(f"{o} {n:,}" for o, n in owners.most_common(5)))
print("  repository hosts: " + ", ".join(f"{h} {n:,}" for h, n in hosts.most_common(5)))
EOF
mv "$TSV.tmp" "$TSV"
mv "$NAMES.tmp" "$NAMES"
echo "$VERSION" >"$STAMP"
echo "wrote $TSV ($(wc -l <"$TSV") tags) and $NAMES ($(wc -l <"$NAMES") names)"
