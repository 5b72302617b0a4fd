#!/usr/bin/env python3
"""Turns the junit XML of a pymongo conformance run into CONFORMANCE.md.

Standard library only. Usage (run.sh calls it; it can also be run by hand on
saved XML):

    python3 conformance/report.py --junit results/full/junit-sync.xml \
        --junit results/full/junit-async.xml --suite-dir ~/.cache/tailstream/conformance/pymongo-4.17.0

It compares the run with conformance/expected_failures.txt (test ids, one per
line, optionally followed by ` # reason`) and, with --ci, fails (exit 1) when
fewer tests of the CI selection (conformance/ci-modules.txt) passed than the
number in conformance/ratchet.txt. --update-ratchet raises ratchet.txt to the
measured count (never lowers it).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter, OrderedDict, defaultdict
from pathlib import Path

from run_on import RunOnExplainer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
# When one test id shows up more than once (a teardown error after a failure, ...),
# the worst outcome counts.
SEVERITY = {PASSED: 0, SKIPPED: 1, FAILED: 2, ERROR: 3}


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------
class Case:
    __slots__ = ("nodeid", "module", "status", "message", "kind", "time")

    def __init__(self, nodeid, module, status, message, kind, time):
        self.nodeid = nodeid
        self.module = module
        self.status = status
        self.message = message
        self.kind = kind
        self.time = time


def _module_of(classname: str, suite_dir: Path | None) -> tuple[str, str]:
    """Split a junit classname ("test.test_cursor.TestCursor") into the module
    path ("test/test_cursor.py") and the class part ("TestCursor")."""
    parts = classname.split(".") if classname else []
    if suite_dir is not None:
        for i in range(len(parts), 0, -1):
            candidate = "/".join(parts[:i]) + ".py"
            if (suite_dir / candidate).is_file():
                return candidate, "::".join(parts[i:])
    # Heuristic: the class part starts at the first capitalised component.
    for i, p in enumerate(parts):
        if p[:1].isupper():
            return "/".join(parts[:i]) + ".py", "::".join(parts[i:])
    return "/".join(parts) + ".py", ""


def _first_line(text: str | None, limit: int = 220) -> str:
    if not text:
        return ""
    for line in text.strip().splitlines():
        line = line.strip()
        if line:
            break
    else:
        return ""
    line = re.sub(r"\s+", " ", line)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def read_junit(paths: list[Path], suite_dir: Path | None) -> "OrderedDict[str, Case]":
    cases: "OrderedDict[str, Case]" = OrderedDict()
    for path in paths:
        root = ET.parse(path).getroot()
        for tc in root.iter("testcase"):
            if not tc.get("name") or (tc.get("classname") == "pytest" and tc.get("name") == "internal"):
                # pytest's INTERNALERROR record (and an empty element it leaves with it): not a
                # test; run.sh reports the test that was running then (--crashed).
                continue
            module, klass = _module_of(tc.get("classname", ""), suite_dir)
            name = tc.get("name", "")
            nodeid = "::".join(p for p in (module, klass, name) if p)
            status, message, kind = PASSED, "", ""
            for child in tc:
                tag = child.tag
                if tag in ("failure", "error", "skipped"):
                    st = {"failure": FAILED, "error": ERROR, "skipped": SKIPPED}[tag]
                    msg = child.get("message") or (child.text or "")
                    if tag == "skipped":
                        # pytest writes "reason" as the message; strip the location prefix.
                        msg = re.sub(r"^[^\s:]+\.py:\d+: ", "", msg or "")
                        if child.get("type") == "pytest.xfail":
                            msg = "xfail: " + msg
                    if SEVERITY[st] > SEVERITY[status]:
                        status, message, kind = st, msg, child.get("type", "")
            time = float(tc.get("time") or 0.0)
            prev = cases.get(nodeid)
            if prev is not None:
                prev.time += time
                if SEVERITY[status] > SEVERITY[prev.status]:
                    prev.status, prev.message, prev.kind = status, message, kind
                continue
            cases[nodeid] = Case(nodeid, module, status, message, kind, time)
    return cases


# The reason prefix of expected failures caused by the test machine, not the server.
ENVIRONMENT = "environment:"


def read_id_list(path: Path) -> "OrderedDict[str, str]":
    """Lines of `test id  # reason`; blank lines and lines starting with # are ignored."""
    out: "OrderedDict[str, str]" = OrderedDict()
    if not path.exists():
        return out
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        test_id, _, reason = line.partition(" #")
        out[test_id.strip()] = reason.strip()
    return out


def read_ci_modules(path: Path) -> list[str]:
    mods = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            mods.append(line)
    return mods


def read_ratchet(path: Path) -> int:
    if not path.exists():
        return 0
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            return int(line)
    return 0


# ---------------------------------------------------------------------------
# summarising
# ---------------------------------------------------------------------------
def counts(cases) -> Counter:
    c = Counter(case.status for case in cases)
    for k in (PASSED, FAILED, ERROR, SKIPPED):
        c.setdefault(k, 0)
    return c


def pct(num: int, den: int) -> str:
    return f"{100.0 * num / den:.1f}%" if den else "n/a"


_NORMALISERS = [
    (re.compile(r"ObjectId\('[0-9a-f]{24}'\)"), "ObjectId(…)"),
    (re.compile(r"0x[0-9a-fA-F]+"), "0x…"),
    (re.compile(r"Timestamp\(\d+, \d+\)"), "Timestamp(…)"),
    (re.compile(r"datetime\.datetime\([^)]*\)"), "datetime(…)"),
    (re.compile(r"\b\d{4,}\b"), "N"),
    (re.compile(r"'[^']{60,}'"), "'…'"),
    (re.compile(r"\{[^{}]{120,}\}"), "{…}"),
]


def failure_signature(message: str) -> str:
    """A short, normalised form of a failure message, to group similar failures."""
    line = _first_line(message, 10_000)
    # "full error: {...}" repeats the message as a document; drop it.
    line = re.split(r", full error: ", line)[0]
    for rx, repl in _NORMALISERS:
        line = rx.sub(repl, line)
    return line[:180] + ("…" if len(line) > 180 else "")


def md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--junit", action="append", required=True, type=Path, help="junit XML file (repeatable)")
    ap.add_argument("--suite-dir", type=Path, help="the unpacked pymongo sdist (to map classnames to files)")
    ap.add_argument("--output", type=Path, default=ROOT / "CONFORMANCE.md")
    ap.add_argument("--pymongo-version", default="?")
    ap.add_argument("--run", default="full", help="name of the run: full, ci or filtered")
    ap.add_argument("--ci", action="store_true", help="enforce the ratchet (exit 1 when below it)")
    ap.add_argument("--update-ratchet", action="store_true", help="raise ratchet.txt to the measured count")
    ap.add_argument("--expected", type=Path, default=HERE / "expected_failures.txt")
    ap.add_argument("--ratchet", type=Path, default=HERE / "ratchet.txt")
    ap.add_argument("--ci-modules", type=Path, default=HERE / "ci-modules.txt")
    ap.add_argument("--wall-seconds", type=int, default=None)
    ap.add_argument("--test-timeout", default=None)
    ap.add_argument("--note", action="append", default=[], help="a line for the Notes section (repeatable)")
    ap.add_argument("--max-failures", type=int, default=400, help="most failures listed one by one")
    ap.add_argument("--server-binary", type=Path, default=None, help="the server binary tested")
    ap.add_argument("--server-commit", default=os.environ.get("TAILSTREAM_COMMIT"),
                    help="the commit the binary was built from (default: $TAILSTREAM_COMMIT, else the "
                         "repo's HEAD, which is right only if the binary was built from it)")
    ap.add_argument("--planned", action="append", default=[], type=Path,
                    help="file of the test ids pytest selected (from conformance_progress.py); "
                         "tests in it that have no result are counted as not run")
    ap.add_argument("--crashed", action="append", default=[], type=Path,
                    help="file of test ids during which pytest itself died; reported as errors")
    args = ap.parse_args(argv)

    missing = [str(p) for p in args.junit if not p.exists()]
    if missing:
        print(f"report: no such junit file: {', '.join(missing)}", file=sys.stderr)
        return 2
    cases = read_junit(args.junit, args.suite_dir)
    for path in args.crashed:
        for nodeid in path.read_text().splitlines():
            nodeid = nodeid.strip()
            if nodeid and (nodeid not in cases or cases[nodeid].status != ERROR):
                cases[nodeid] = Case(nodeid, nodeid.split("::")[0], ERROR,
                                     "pytest itself died while running this test (see pytest-*.log); "
                                     "the tests after it were run by a new pytest process", "crash", 0.0)
    planned: "OrderedDict[str, str]" = OrderedDict()
    for path in args.planned:
        for nodeid in path.read_text().splitlines():
            if nodeid.strip():
                planned[nodeid.strip()] = nodeid.split("::")[0]
    not_run = [t for t in planned if t not in cases]
    not_run_by_module = Counter(planned[t] for t in not_run)
    all_cases = list(cases.values())
    total = counts(all_cases)
    run_count = len(all_cases)
    non_skipped = run_count - total[SKIPPED]

    ci_modules = read_ci_modules(args.ci_modules)
    ci_cases = [c for c in all_cases if c.module in ci_modules]
    ci_total = counts(ci_cases)
    ci_passed = ci_total[PASSED]
    ratchet = read_ratchet(args.ratchet)

    expected = read_id_list(args.expected)
    bad = [c for c in all_cases if c.status in (FAILED, ERROR)]
    unexpected_failures = [c for c in bad if c.nodeid not in expected]
    unexpected_passes = [c for c in all_cases if c.nodeid in expected and c.status == PASSED]
    expected_not_run = [t for t in expected if t not in cases]

    by_module: "OrderedDict[str, list]" = OrderedDict()
    for c in sorted(all_cases, key=lambda c: (c.module.count("/asynchronous/"), c.module)):
        by_module.setdefault(c.module, []).append(c)

    if args.server_commit:
        commit = args.server_commit
    else:
        commit = git("rev-parse", "--short", "HEAD") or "unknown"
        if git("status", "--porcelain", "--untracked-files=no"):
            commit += " (with uncommitted changes)"
    binary_line = None
    if args.server_binary is not None and args.server_binary.exists():
        st = args.server_binary.stat()
        built = _dt.datetime.fromtimestamp(st.st_mtime, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        binary_line = f"{args.server_binary} (modified {built})"
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    headline = f"{total[PASSED]} passed of {non_skipped} run ({pct(total[PASSED], non_skipped)} of non-skipped)"
    # Failures listed with an `environment:` reason come from the machine the suite runs on
    # (no outside DNS, a docker container pymongo reports in its handshake metadata, ...),
    # not from the server: the figure without them is what the server itself achieves.
    env_failed = [c for c in bad if expected.get(c.nodeid, "").startswith(ENVIRONMENT)]
    server_line = (
        f"{total[PASSED]} passed of {non_skipped - len(env_failed)} run without the "
        f"{len(env_failed)} failures the test machine causes "
        f"({pct(total[PASSED], non_skipped - len(env_failed))}; their reasons start with "
        f"`{ENVIRONMENT}` in expected_failures.txt)"
    )
    ci_line = (
        f"{ci_passed} passed of {len(ci_cases) - ci_total[SKIPPED]} run "
        f"({pct(ci_passed, len(ci_cases) - ci_total[SKIPPED])} of non-skipped); ratchet: {ratchet}"
    )

    L: list[str] = []
    w = L.append
    w("# pymongo conformance")
    w("")
    w(f"pymongo's own test suite (pymongo {args.pymongo_version}, from its source distribution) run against "
      "Tailstream by `conformance/run.sh`. Generated by `conformance/report.py`; see `conformance/README.md`.")
    w("")
    # The headline figures first, in one table, with the command that measures each.
    whole = f"**{headline}**" + (
        f"; {total[PASSED]} of {non_skipped - len(env_failed)} "
        f"({pct(total[PASSED], non_skipped - len(env_failed))}) without the {len(env_failed)} "
        "failures the test machine causes" if env_failed else "")
    run_name = "whole suite, sync and async" if args.run.startswith("full") else f"this run ({args.run})"
    w("| run | figure | date (UTC), server build | how to run |")
    w("|---|---|---|---|")
    how = ("`bash conformance/run.sh` (30-35 minutes on 2 cores; rewrites this file)"
           if args.run.startswith("full") else f"`bash conformance/run.sh --{args.run}`")
    w(f"| {run_name} | {whole} | {now.replace(' UTC', '')}, {commit} | {how} |")
    if ci_cases:
        w(f"| CI selection: {', '.join(m.split('/')[-1] for m in ci_modules)} | **{ci_line}** | "
          "counted in the same run | `bash conformance/run.sh --ci` (about 2 minutes; fails when "
          "fewer pass than `conformance/ratchet.txt`; `scripts/test.sh` runs it) |")
    # Runs of other configurations (authentication, TLS), measured separately and kept
    # by hand in other-runs.md as rows of this table.
    other_runs = Path(__file__).with_name("other-runs.md")
    if other_runs.exists():
        L.extend(line for line in other_runs.read_text().splitlines() if line.startswith("|"))
    w("")
    w("## This run")
    w("")
    w(f"- **{headline}**")
    if env_failed:
        w(f"- **{server_line}**")
    w(f"- Date: {now}")
    w(f"- pymongo: {args.pymongo_version}")
    w(f"- Server commit: {commit}")
    if binary_line:
        w(f"- Server binary: {binary_line}")
    w(f"- Run: {args.run}" + (f", {args.wall_seconds // 60} min {args.wall_seconds % 60} s of pytest" if args.wall_seconds is not None else "")
      + (f", per-test timeout {args.test_timeout} s" if args.test_timeout else ""))
    w(f"- Totals: {total[PASSED]} passed, {total[FAILED]} failed, {total[ERROR]} errors, "
      f"{total[SKIPPED]} skipped" + (f"; {len(not_run)} selected tests did not run (see Notes)" if not_run else ""))
    if ci_cases:
        w(f"- CI selection ({', '.join(m.split('/')[-1] for m in ci_modules)}): {ci_line}")
    w("")
    notes = list(args.note)
    if not_run:
        notes.append(f"{len(not_run)} of the {len(planned)} tests pytest selected have no result "
                     "(cut off by the time limit, or lost when pytest died); they are left out of the "
                     "counts above and listed as `not run` per module.")
    if notes:
        w("## Notes")
        w("")
        for n in notes:
            w(f"- {n}")
        w("")

    w("## Per module")
    w("")
    for mod in not_run_by_module:
        by_module.setdefault(mod, [])
    nr_col = bool(not_run)
    w("| module | passed | failed | errors | skipped |" + (" not run |" if nr_col else "") + " pass % of non-skipped |")
    w("|---|---:|---:|---:|---:|" + ("---:|" if nr_col else "") + "---:|")
    for mod, cs in by_module.items():
        k = counts(cs)
        ns = len(cs) - k[SKIPPED]
        nr = f" {not_run_by_module.get(mod, 0)} |" if nr_col else ""
        w(f"| {mod} | {k[PASSED]} | {k[FAILED]} | {k[ERROR]} | {k[SKIPPED]} |{nr} {pct(k[PASSED], ns)} |")
    nr = f" **{len(not_run)}** |" if nr_col else ""
    w(f"| **total** | **{total[PASSED]}** | **{total[FAILED]}** | **{total[ERROR]}** | **{total[SKIPPED]}** |{nr} "
      f"**{pct(total[PASSED], non_skipped)}** |")
    w("")

    # Failure causes: normalised messages, most frequent first.
    sig = Counter()
    sig_example: dict[str, str] = {}
    for c in bad:
        s = failure_signature(c.message) or "(no message)"
        sig[s] += 1
        sig_example.setdefault(s, c.nodeid)
    if sig:
        w("## Most frequent failure messages")
        w("")
        w("Failures and errors grouped by their (normalised) first message line.")
        w("")
        w("| count | message | example |")
        w("|---:|---|---|")
        for s, n in sig.most_common(40):
            w(f"| {n} | `{md_escape(s).replace('`', chr(39))}` | {md_escape(sig_example[s])} |")
        if len(sig) > 40:
            w(f"| … | {len(sig) - 40} more distinct messages | |")
        w("")

    skips = Counter()
    run_on = RunOnExplainer(args.suite_dir)
    for c in all_cases:
        if c.status == SKIPPED:
            # Unified-format skips name their class first ("TestUnifiedFoo runOnRequirements
            # not satisfied"): group them by the reason alone, made specific with the
            # requirements Tailstream does not meet when the spec file says which.
            reason = re.sub(r"^Test\w+ (?=runOnRequirements)", "", _first_line(c.message, 160))
            if reason == "runOnRequirements not satisfied":
                unmet = run_on.reason(c.nodeid)
                if unmet:
                    reason = f"runOnRequirements: needs {unmet}"
            elif reason == "xfail:":
                # pymongo's own expected failures, given without a reason: the unified
                # runner's valid-fail files (they must fail), or the `expected_failures`
                # a test module passes for what the driver does not implement.
                reason = ("xfail: the unified runner's valid-fail tests (fail by design)"
                          if "::TestUnifiedTestFormatValidFail" in c.nodeid else
                          "xfail: listed as expected failures by pymongo's test module "
                          "(driver helpers it lacks, e.g. listCollectionObjects, mapReduce)")
            skips[reason or "(no reason)"] += 1
    if skips:
        w("## Skips by reason")
        w("")
        w("| count | reason |")
        w("|---:|---|")
        for reason, n in skips.most_common(60):
            w(f"| {n} | {md_escape(reason)} |")
        if len(skips) > 60:
            rest = sum(n for _, n in skips.most_common()[60:])
            w(f"| {rest} | ({len(skips) - 60} other reasons) |")
        w("")

    w("## Expected failures")
    w("")
    if not expected:
        w("`conformance/expected_failures.txt` lists no test, so every failure below counts as unexpected.")
    else:
        w(f"`conformance/expected_failures.txt` lists {len(expected)} tests.")
        w("")
        ci_unexpected = sum(1 for c in unexpected_failures if c.module in ci_modules)
        w(f"- Unexpected failures (failed or errored, not listed): {len(unexpected_failures)}"
          + (f", {ci_unexpected} of them in the CI selection" if len(ci_cases) != len(all_cases) else ""))
        w(f"- Unexpected passes (listed, but passed: remove them from the list): {len(unexpected_passes)}")
        for c in unexpected_passes:
            w(f"  - `{c.nodeid}`")
        if expected_not_run:
            w(f"- Listed but not in this run: {len(expected_not_run)}")
    w("")

    if bad:
        w("## Failures")
        w("")
        w("`F` failed, `E` error (setup/teardown or collection); first line of the message. "
          "Tests listed in expected_failures.txt are marked *(expected)*.")
        w("")
        cur_mod = None
        for i, c in enumerate(sorted(bad, key=lambda c: (c.module.count("/asynchronous/"), c.nodeid))):
            if i >= args.max_failures:
                w("")
                w(f"… and {len(bad) - args.max_failures} more (see the junit XML).")
                break
            if c.module != cur_mod:
                cur_mod = c.module
                w("")
                w(f"### {cur_mod}")
                w("")
            tag = "F" if c.status == FAILED else "E"
            short = c.nodeid[len(c.module) + 2:] if c.nodeid.startswith(c.module + "::") else c.nodeid
            exp = " *(expected)*" if c.nodeid in expected else ""
            w(f"- {tag} `{short}`{exp}: {md_escape(_first_line(c.message, 200))}")
        w("")

    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(L).rstrip() + "\n")

    # ---- console summary, ratchet --------------------------------------------
    print(f"conformance: {headline}")
    if env_failed:
        print(f"conformance: {server_line}")
    print(f"conformance: {total[PASSED]} passed, {total[FAILED]} failed, {total[ERROR]} errors, "
          f"{total[SKIPPED]} skipped")
    if ci_cases:
        print(f"conformance: CI selection: {ci_line}")
    if expected:
        ci_unexpected = sum(1 for c in unexpected_failures if c.module in ci_modules)
        print(f"conformance: {len(unexpected_failures)} unexpected failures ({ci_unexpected} in the CI selection), "
              f"{len(unexpected_passes)} unexpected passes (expected_failures.txt)")
        for c in unexpected_passes[:50]:
            print(f"conformance:   unexpected pass: {c.nodeid}")
    for n in notes:
        print(f"conformance: note: {n}")
    print(f"conformance: report written to {args.output}")

    rc = 0
    if args.ci:
        if not ci_cases:
            print("conformance: RATCHET FAILED: the run has no test of the CI selection", file=sys.stderr)
            rc = 1
        elif ci_passed < ratchet:
            print(f"conformance: RATCHET FAILED: {ci_passed} tests of the CI selection passed, fewer than "
                  f"the {ratchet} in conformance/ratchet.txt ({ratchet - ci_passed} fewer). "
                  "Something that passed before fails now: see the report's failure list.", file=sys.stderr)
            rc = 1
        elif ci_passed > ratchet:
            print(f"conformance: ratchet OK: {ci_passed} passed, more than the {ratchet} in ratchet.txt; "
                  "raise it with `bash conformance/run.sh --ci --update-ratchet` and commit ratchet.txt")
        else:
            print(f"conformance: ratchet OK: {ci_passed} passed = ratchet.txt")
    if args.update_ratchet:
        if not ci_cases:
            print("conformance: ratchet.txt left alone: the run has no test of the CI selection")
        elif ci_passed > ratchet:
            args.ratchet.write_text(f"{ci_passed}\n")
            print(f"conformance: ratchet.txt raised from {ratchet} to {ci_passed}")
        else:
            print(f"conformance: ratchet.txt left at {ratchet} (measured {ci_passed}; it never goes down)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
