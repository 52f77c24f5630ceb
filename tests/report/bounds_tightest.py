#!/usr/bin/env python3
"""Bounds in tests/report/test_validation_bounds.cpp may only be tightened.

The file's bounds (`constexpr double|int kName = value;` and the per-source map
kDevSourceMapeBoundPct) are compared with tests/report/validation_bounds_tightest.txt, the
tightest value each has had: the lowest for a bound on an error, the highest for a count of rows
that must be compared (`...RowsCompared`). A bound looser than its tightest fails, unless the list
records the raise (the value, the commit and why); a raise may not grow, and a bound may not be
dropped. Where git history is at hand the list is itself checked against every committed version
of the file, so the list cannot be loosened in its place.

    bounds_tightest.py check BOUNDS_CPP LIST [REPO]   the test (meson test runs this)
    bounds_tightest.py derive BOUNDS_CPP REPO         the tightest values in the history, as a list
"""
import re
import subprocess
import sys
from pathlib import Path

CONSTANT = re.compile(r"constexpr\s+(?:double|int)\s+(k[A-Za-z0-9_]+)\s*=\s*([0-9.]+)\s*;")
SOURCE_MAP = re.compile(r"kDevSourceMapeBoundPct\s*=\s*\{(.*?)\};", re.S)
SOURCE_ENTRY = re.compile(r'\{\s*"([^"]+)"\s*,\s*([0-9.]+)\s*\}')


def bounds(text):
    """name -> value of every bound in one version of the file."""
    out = {name: float(v) for name, v in CONSTANT.findall(text)}
    m = SOURCE_MAP.search(text)
    if m:
        for src, v in SOURCE_ENTRY.findall(m.group(1)):
            out[f"kDevSourceMapeBoundPct[{src}]"] = float(v)
    return out


def at_least(name):
    """Whether the bound is a floor (rows that must be compared) rather than a ceiling."""
    return name.endswith("RowsCompared")


def tighter(name, a, b):
    return a > b if at_least(name) else a < b


def fmt(v):
    return f"{v:g}"


def history(bounds_cpp, repo):
    """[(commit, bounds)] for every committed version of the file, oldest first; None without git
    history (no git, not a repository, a shallow clone)."""
    try:
        top = subprocess.run(["git", "-C", repo, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
        if top.returncode != 0:
            return None
        shallow = subprocess.run(["git", "-C", repo, "rev-parse", "--is-shallow-repository"], capture_output=True,
                                 text=True)
        if shallow.stdout.strip() == "true":
            return None
        rel = Path(bounds_cpp).resolve().relative_to(Path(top.stdout.strip()).resolve()).as_posix()
        revs = subprocess.run(["git", "-C", repo, "rev-list", "--full-history", "--reverse", "HEAD", "--", rel],
                              capture_output=True, text=True, check=True).stdout.split()
        out = []
        for rev in revs:
            shown = subprocess.run(["git", "-C", repo, "show", f"{rev}:{rel}"], capture_output=True, text=True)
            if shown.returncode == 0:
                out.append((rev[:7], bounds(shown.stdout)))
        return out or None
    except (OSError, ValueError, subprocess.CalledProcessError):
        return None


def tightest_in(revisions):
    """name -> (tightest value, first commit that had it)."""
    best = {}
    for rev, b in revisions:
        for name, v in b.items():
            if name not in best or tighter(name, v, best[name][0]):
                best[name] = (v, rev)
    return best


def read_list(path):
    """name -> {tightest, reached, raised, raised_in, why} from the committed list."""
    out = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        f = line.split()
        if len(f) < 3 or (len(f) > 3 and (f[3] != "raised" or len(f) < 7)):
            raise SystemExit(f"{path}:{n}: expected NAME TIGHTEST COMMIT [raised VALUE COMMIT WHY...]")
        out[f[0]] = {"tightest": float(f[1]), "reached": f[2],
                     "raised": float(f[4]) if len(f) > 3 else None, "raised_in": f[5] if len(f) > 3 else None}
    return out


def check(bounds_cpp, list_path, repo):
    current = bounds(Path(bounds_cpp).read_text(encoding="utf-8"))
    recorded = read_list(list_path)
    errors = []
    if len(current) < 10:
        errors.append(f"only {len(current)} bounds found in {bounds_cpp}: the parser no longer matches the file")
    for name, v in sorted(current.items()):
        r = recorded.get(name)
        if r is None:
            errors.append(f"{name} = {fmt(v)} is not in {list_path}: record it (tightest {fmt(v)})")
            continue
        t = r["tightest"]
        if tighter(name, v, t):
            errors.append(f"{name} = {fmt(v)} is tighter than the recorded {fmt(t)}: record {fmt(v)} as its tightest")
        elif tighter(name, t, v):
            if r["raised"] is None:
                errors.append(f"{name} = {fmt(v)} is looser than the tightest it has been, {fmt(t)} ({r['reached']}): "
                              "tighten it back, or record the raise and why in the list")
            elif r["raised"] != v:
                errors.append(f"{name} = {fmt(v)} but its recorded raise is {fmt(r['raised'])} ({r['raised_in']}): "
                              "a raise records the value the file has, and may not grow")
        elif r["raised"] is not None:
            errors.append(f"{name} is back at its tightest {fmt(t)}: drop its raise from the list")
        status = "" if r["raised"] is None or not tighter(name, t, v) else f"  (raised in {r['raised_in']})"
        print(f"  {name:42s} {fmt(v):>6s}  tightest {fmt(t):>6s}{status}")
    for name in sorted(set(recorded) - set(current)):
        errors.append(f"{name} (tightest {fmt(recorded[name]['tightest'])}) is no longer in {bounds_cpp}: "
                      "a bound may be tightened, not dropped")
    revisions = history(bounds_cpp, repo) if repo else None
    if revisions is None:
        print("no git history here: checked against the list alone")
    else:
        for name, (v, rev) in sorted(tightest_in(revisions).items()):
            r = recorded.get(name)
            if r is not None and tighter(name, v, r["tightest"]):
                errors.append(f"{list_path}: {name} was {fmt(v)} in {rev}, tighter than the list's {fmt(r['tightest'])}")
        print(f"the list checked against {len(revisions)} committed versions of the file")
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


def derive(bounds_cpp, repo):
    revisions = history(bounds_cpp, repo)
    if revisions is None:
        print("no git history", file=sys.stderr)
        return 1
    for name, (v, rev) in sorted(tightest_in(revisions).items()):
        print(f"{name:42s} {fmt(v):>6s}  {rev}")
    return 0


def main(argv):
    if len(argv) >= 4 and argv[1] == "check":
        return check(argv[2], argv[3], argv[4] if len(argv) > 4 else None)
    if len(argv) == 4 and argv[1] == "derive":
        return derive(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
