"""Says which `runOnRequirements` of a unified-format spec test Tailstream does not meet.

pymongo's unified runner skips such a test with one message for every cause,
"runOnRequirements not satisfied". To explain each skip, this finds the JSON file
and test behind a skipped test id (as pymongo's `generate_test_classes` names
them) and evaluates its requirements against what Tailstream reports to drivers,
the same way pymongo's `is_run_on_requirement_satisfied` does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# What Tailstream reports (buildInfo `version`, hello of a one-member replica set,
# getCmdLineOpts without auth or TLS). Change together with the server.
SERVER_VERSION = (7, 0, 0)
TOPOLOGY = "replicaset"
AUTH = False


def _version(text: str) -> tuple[int, ...]:
    parts = [int(p) for p in re.findall(r"\d+", text)[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def _snake_to_camel(snake: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), snake)


def unmet(requirement: dict) -> list[str]:
    """The conditions of one requirement (an alternative) Tailstream does not meet."""
    out = []
    topologies = requirement.get("topologies")
    if topologies and TOPOLOGY not in topologies:
        out.append("topology " + " or ".join(topologies))
    low = requirement.get("minServerVersion")
    if low and _version(low) > SERVER_VERSION:
        out.append(f"server version >= {low}")
    high = requirement.get("maxServerVersion")
    if high and _version(high) < SERVER_VERSION:
        # Tests of behaviour that newer servers changed or removed: one group.
        out.append("a server older than {}.{} (maxServerVersion)".format(*SERVER_VERSION[:2]))
    if requirement.get("auth") is True and not AUTH:
        out.append("authentication")
    if requirement.get("serverless") == "require":
        out.append("serverless")
    if "csfle" in requirement:
        out.append("client-side field level encryption")
    for name, value in (requirement.get("serverParameters") or {}).items():
        out.append(f"server parameter {name}={json.dumps(value)}")
    return out


def explain(requirements: list[dict]) -> str | None:
    """Why none of the alternatives is met; None when one is (the skip has another cause)."""
    reasons = []
    for req in requirements:
        missing = unmet(req)
        if not missing:
            return None
        reasons.append(" and ".join(missing))
    if not reasons:
        return None
    return "; or ".join(dict.fromkeys(reasons))


class RunOnExplainer:
    """Maps test ids ("test/test_x.py::TestUnifiedFoo::test_bar") to their spec files."""

    def __init__(self, suite_dir: Path | None):
        self.by_class: dict[str, list[tuple[Path, dict]]] = {}
        if suite_dir is None or not (suite_dir / "test").is_dir():
            return
        root = suite_dir / "test"
        for path in sorted(root.rglob("*.json")):
            try:
                spec = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(spec, dict) or "schemaVersion" not in spec or "tests" not in spec:
                continue
            rel = path.relative_to(root)
            # test_unified_format.py alone passes a class-name prefix.
            prefix = "UnifiedTestFormat" if rel.parts[0] == "unified-test-format" else ""
            name = "Test{}_{}_{}".format(
                prefix,
                path.parent.name.replace("-", "_"),
                path.stem.replace("-", "_").replace(".", "_"),
            )
            self.by_class.setdefault(_snake_to_camel(name), []).append((rel, spec))

    def _spec(self, module: str, klass: str) -> dict | None:
        found = self.by_class.get(klass)
        if not found:
            return None
        if len(found) > 1:
            # Same file name in two spec directories (retryable_reads/unified and
            # retryable_writes/unified): the module's name names its directory.
            stem = Path(module).stem
            for rel, spec in found:
                if rel.parts and rel.parts[0] in stem:
                    return spec
        return found[0][1]

    def reason(self, nodeid: str) -> str | None:
        """The unmet requirements of a skipped unified test, or None if unknown."""
        parts = nodeid.split("::")
        if len(parts) < 3:
            return None
        module, klass, method = parts[0], parts[-2], parts[-1]
        spec = self._spec(module, klass)
        if spec is None:
            return None
        why = explain(spec.get("runOnRequirements") or [])
        if why:
            return why
        for test in spec.get("tests", []):
            name = "test_" + test.get("description", "").strip(". ").replace(" ", "_").replace(".", "_")
            if name == method:
                return explain(test.get("runOnRequirements") or [])
        return None
