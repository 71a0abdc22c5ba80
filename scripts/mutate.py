#!/usr/bin/env python3
"""mutate.py - mutation testing: applies each one-line mutant of tests/mutants.txt to a scratch
copy of the tree, rebuilds incrementally, runs the matching ctest cases and prints the kill rate
and the survivors (`make mutate`; not part of CI: minutes per mutant on a loaded machine).

Mutant list format, one per line (blank lines and lines starting with # are ignored):
    id @@ file @@ original text @@ replacement text @@ ctest regex
The original text must occur exactly once in the file. A mutant is *killed* when one of the
matching ctest cases fails or times out, *stillborn* when it does not compile (left out of
the rate), and *survives* otherwise. Each mutant's build or test output is kept in
<scratch>/logs/<id>.log (--scratch).
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

SEP = " @@ "


def load(path):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.split(SEP)
            if len(parts) != 5:
                sys.exit(f"{path}:{n}: expected 5 fields separated by '{SEP.strip()}', got {len(parts)}")
            out.append(dict(zip(("id", "file", "orig", "repl", "regex"), (p.strip() for p in parts)), line=n))
    return out


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:  # the group is already gone
        pass


def sh(cmd, cwd=None, timeout=None):
    """Runs cmd in its own process group; on a timeout or an interrupt the whole group goes."""
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         encoding="utf-8", errors="replace",  # a failing test may print any bytes
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        kill_group(p)
        out, _ = p.communicate()
        return 124, out
    except BaseException:
        kill_group(p)
        p.wait()
        raise


def on_signal(signum, frame):
    raise KeyboardInterrupt  # unwinds through the restore in main()


def seed_scratch(root, build, scratch, jobs):
    """Copies the tree to scratch/src and, the first time, the build tree to scratch/build with
    its absolute paths rewritten (so only what differs is rebuilt), then brings it up to date."""
    src, bld = os.path.join(scratch, "src"), os.path.join(scratch, "build")
    os.makedirs(src, exist_ok=True)
    rc, out = sh(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    if rc:
        sys.exit("git ls-files failed:\n" + out)
    files = {f for f in out.split("\0") if f and os.path.isfile(os.path.join(root, f))}
    for f in files:
        a, b = os.path.join(root, f), os.path.join(src, f)
        sa = os.stat(a)
        if not os.path.exists(b):  # first copy: the tree's mtimes, matching the seeded build tree
            os.makedirs(os.path.dirname(b), exist_ok=True)
            shutil.copy2(a, b)
            continue
        sb = os.stat(b)
        if sb.st_size == sa.st_size and sb.st_mtime_ns == sa.st_mtime_ns:
            continue
        with open(a, "rb") as fa, open(b, "rb") as fb:
            if fa.read() == fb.read():
                continue
        shutil.copyfile(a, b)  # changed: a fresh mtime, so its objects are rebuilt
    for d, _, fs in os.walk(src):  # and drop what the tree no longer has
        for fn in fs:
            rel = os.path.relpath(os.path.join(d, fn), src)
            if rel not in files:
                os.remove(os.path.join(d, fn))
    if not os.path.exists(os.path.join(bld, "CMakeCache.txt")):
        if os.path.exists(os.path.join(build, "CMakeCache.txt")):
            shutil.copytree(build, bld, symlinks=True, dirs_exist_ok=True)
            pairs = [(os.path.realpath(build).encode(), bld.encode()), (os.path.realpath(root).encode(), src.encode())]
            for d, _, files in os.walk(bld):
                for fn in files:
                    p = os.path.join(d, fn)
                    if os.path.islink(p) or os.path.getsize(p) > (8 << 20):
                        continue
                    with open(p, "rb") as f:
                        data = f.read()
                    if b"\0" in data[:4096]:
                        continue
                    new = data
                    for a, b in pairs:
                        new = new.replace(a, b)
                    if new != data:
                        st = os.stat(p)
                        with open(p, "wb") as f:
                            f.write(new)
                        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
        else:
            rc, out = sh(["cmake", "-S", src, "-B", bld, "-DCMAKE_BUILD_TYPE=Release"])
            if rc:
                sys.exit("configure failed:\n" + out)
    print(f"mutate: building the unmutated scratch tree in {bld} ...", flush=True)
    rc, out = sh(["cmake", "--build", bld, f"-j{jobs}"])
    if rc:
        sys.exit("the unmutated tree does not build:\n" + out[-3000:])
    return src, bld


def targets_for(bld, regex):
    """Executables the matching ctest cases run (plus the CLI, which scripts call)."""
    rc, out = sh(["ctest", "-N", "-V", "-R", regex], cwd=bld)
    names = {"llmsys"}
    for m in re.finditer(r"Test command: (\S+)(.*)", out):
        for tok in [m.group(1)] + m.group(2).split():
            tok = tok.strip('"')  # ctest -V quotes the arguments: helper programs passed to scripts
            # built programs only: an argument under the build tree may be a work directory
            # (robust.demo_quick's --workdir), which no target builds
            if (tok.startswith(bld) and os.path.basename(tok) and "." not in os.path.basename(tok)
                    and os.path.isfile(tok) and os.access(tok, os.X_OK)):
                names.add(os.path.basename(tok))
    n = len(re.findall(r"Test +#", out))
    return sorted(names), n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    ap.add_argument("--list", default=os.path.join(root, "tests", "mutants.txt"))
    ap.add_argument("--only", default="", help="regex on mutant ids: run only those")
    ap.add_argument("--build", default=os.path.join(root, "build"), help="build tree to seed the scratch one from")
    ap.add_argument("--scratch", default="/tmp/llmsys-mutate")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per ctest case")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--check", action="store_true", help="only check that every original text occurs once")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip running the selected mutants' tests on the unmutated tree first")
    a = ap.parse_args()
    for sig in (signal.SIGINT, signal.SIGTERM):  # also when started in the background
        signal.signal(sig, on_signal)
    muts = [m for m in load(a.list) if not a.only or re.search(a.only, m["id"])]
    bad = 0
    for m in muts:
        with open(os.path.join(root, m["file"])) as f:
            n = f.read().count(m["orig"])
        if n != 1:
            print(f"{a.list}:{m['line']}: {m['id']}: original text occurs {n} times in {m['file']}")
            bad += 1
    if bad or a.check:
        print(f"mutate: {len(muts)} mutants, {bad} bad")
        return 1 if bad else 0
    src, bld = seed_scratch(root, os.path.realpath(a.build), os.path.realpath(a.scratch), a.jobs)
    if not a.no_baseline:  # a case that fails unmutated would count every mutant as killed
        # plain groups: ctest's regex engine has no (?:...) and, given one, runs no test at all
        union = "|".join(f"({r})" for r in sorted({m["regex"] for m in muts}))
        print("mutate: the selected mutants' tests on the unmutated tree ...", flush=True)
        rc, out = sh(["ctest", "-R", union, "-j", str(a.jobs), "--timeout", str(a.timeout), "--no-tests=error"], cwd=bld)
        if rc:
            failed = ", ".join(f"{t} ({r})" for t, r in re.findall(r"\d+ - (\S+) \((\w+)", out)) or "ctest failed"
            sys.exit(f"mutate: these fail without any mutant, so no mutant can be judged by them: {failed}")
    res = []
    t_all = time.time()
    for i, m in enumerate(muts):
        path = os.path.join(src, m["file"])
        with open(path) as f:
            orig = f.read()
        t0 = time.time()
        try:
            with open(path, "w") as f:
                f.write(orig.replace(m["orig"], m["repl"], 1))
            tg, ntests = targets_for(bld, m["regex"])
            rc, out = sh(["cmake", "--build", bld, f"-j{a.jobs}", "--target"] + tg)
            if rc:
                status, why = "stillborn", "does not compile"
            else:
                rc, out = sh(["ctest", "-R", m["regex"], "-j", str(a.jobs), "--timeout", str(a.timeout), "--stop-on-failure",
                              "--output-on-failure"], cwd=bld, timeout=a.timeout * max(ntests, 1) + 60)
                failed = re.findall(r"\d+ - (\S+) \((\w+)", out)
                if rc and failed:
                    status, why = "killed", ", ".join(f"{t} ({r})" for t, r in failed)
                elif rc == 124:
                    status, why = "killed", "ctest timed out"
                elif rc:
                    status, why = "killed", "ctest failed"
                else:
                    status, why = "survived", f"{ntests} tests passed"
        finally:
            with open(path, "w") as f:
                f.write(orig)
        dt = time.time() - t0
        res.append((m, status, why, dt))
        # which check killed it: the failing case's own lines are in its output
        os.makedirs(os.path.join(a.scratch, "logs"), exist_ok=True)
        with open(os.path.join(a.scratch, "logs", m["id"] + ".log"), "w") as f:
            f.write(out)
        print(f"[{i + 1:3d}/{len(muts)}] {status:9s} {m['id']:28s} {dt:6.1f} s  {why}", flush=True)
    # leave the scratch build unmutated for the next run
    sh(["cmake", "--build", bld, f"-j{a.jobs}"])
    live = [r for r in res if r[1] != "stillborn"]
    killed = sum(1 for r in live if r[1] == "killed")
    print(f"\nmutate: {killed}/{len(live)} killed ({100.0 * killed / max(len(live), 1):.1f}%), "
          f"{len(res) - len(live)} stillborn, {time.time() - t_all:.0f} s")
    surv = [r for r in live if r[1] == "survived"]
    if surv:
        print("survivors:")
        for m, _, _, _ in surv:
            print(f"  {m['id']}: {m['file']}: '{m['orig']}' -> '{m['repl']}'  (ctest -R '{m['regex']}')")
    return 0 if not surv else 3


if __name__ == "__main__":
    sys.exit(main())
