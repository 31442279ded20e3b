"""Generated bad files through every command that reads one: no traceback, and a refusal names the field.

Hypothesis takes a valid graph (``poet solve --graph``), schedule (``poet validate``, ``poet report``)
or device profile (``poet solve --device file.toml``, ``poet export-graph --device``) and replaces one
value, anywhere in it, by a drawn one (null, a boolean, a string, a list, an object, NaN, infinities,
negative, fractional and huge numbers, deep nesting), or deletes a key.  The command runs in this
process: it must not raise, and when it refuses the file, what it prints must name the key at fault
(or the key holding the list at fault).  Examples per command: ``POET_FUZZ_EXAMPLES`` (default 15).
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from poet.cli import main
from poet.hardware.device import DEVICE_DIR

EXAMPLES = int(os.environ.get("POET_FUZZ_EXAMPLES", "15"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)

BAD_JSON = st.one_of(
    st.sampled_from(["null", "true", "false", '"12"', '""', "[]", "{}", "[1, 2]", '{"a": 1}', "NaN", "Infinity"]),
    st.sampled_from(["-Infinity", "-1", "0", "0.5", "-0.0", "1e400", "1e-400", "9" * 400, "[" * 50 + "]" * 50]),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(max_size=6).map(json.dumps),
)
BAD_TOML = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1.5", "true", '"fast"', '""', "[1, 2]", "{a = 1}", "1e999"]),
    st.sampled_from(["1" + "0" * 40, "-0.0", "[]", "0x10"]),
    st.integers(min_value=-(10**25), max_value=10**25).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)


def _paths(obj, prefix=()):
    """Every place in a JSON value: (path, value)."""
    out = [(prefix, obj)] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):  # the first elements stand for the rest
            out += _paths(v, prefix + (i,))
    return out


def _mutated(obj, draw):
    """``obj`` as JSON text with one value replaced by drawn text (or its key deleted), and the keys that
    may name the fault (the path's dict keys, innermost first)."""
    path, _ = draw(st.sampled_from(_paths(obj)))
    keys = [k for k in reversed(path) if isinstance(k, str)]
    o = json.loads(json.dumps(obj))
    cur = o
    for k in path[:-1]:
        cur = cur[k]
    if isinstance(cur, dict) and draw(st.integers(0, 5)) == 0:
        del cur[path[-1]]
        return json.dumps(o), keys
    cur[path[-1]] = "__MARK__"
    return json.dumps(o).replace('"__MARK__"', draw(BAD_JSON)), keys


def _file(tmp_path_factory, name: str, text: str):
    p = tmp_path_factory.mktemp("fuzz") / name
    p.write_text(text)
    return p


def _run(capsys, argv):
    """``poet ARGV`` in this process: its exit code and everything it printed (a raise fails the test)."""
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out, out.err
    return rc, out.out + out.err


def _names_the_field(rc, text, keys):
    if rc == 0:
        return
    said = text.lower()
    names = {str(k).lower() for k in keys} | {str(k).lower().removesuffix("s") for k in keys}  # "edge 3" names "edges"
    assert any(k in said for k in names), f"refused without naming any of {keys}: {text[-600:]}"


@FUZZ
@given(data=st.data())
def test_solve_a_generated_bad_graph(data, tmp_path_factory, capsys, graph_dict):
    text, keys = _mutated(graph_dict, data.draw)
    p = _file(tmp_path_factory, "g.json", text)
    rc, out = _run(capsys, ["solve", "--graph", str(p), "--memory", "80%", "--time-limit", "2"])
    _names_the_field(rc, out, keys)


@FUZZ
@given(data=st.data())
def test_validate_and_report_a_generated_bad_schedule(data, tmp_path_factory, capsys, schedule_dict):
    text, keys = _mutated(schedule_dict, data.draw)
    p = _file(tmp_path_factory, "s.json", text)
    for cmd in ("validate", "report"):
        rc, out = _run(capsys, [cmd, str(p)])
        # a value that is fine as a value may still make the replay break its budget: the validator's verdict
        _names_the_field(rc, out, keys + ["steps", "step", "stage", "exceeds the budget"])


@FUZZ
@given(data=st.data())
def test_solve_and_export_with_a_generated_bad_device_profile(data, tmp_path_factory, capsys):
    lines = (DEVICE_DIR / "m4.toml").read_text().splitlines()
    keyed = [i for i, ln in enumerate(lines) if "=" in ln and not ln.lstrip().startswith("#")]
    i = data.draw(st.sampled_from(keyed))
    key = lines[i].split("=")[0].strip()
    if data.draw(st.integers(0, 5)) == 0:
        lines[i] = ""
    else:
        lines[i] = f"{key} = {data.draw(BAD_TOML)}"
    p = _file(tmp_path_factory, "dev.toml", "\n".join(lines) + "\n")
    rc, out = _run(capsys, ["solve", "--model", "linear", "--device", str(p), "--memory", "80%", "--time-limit", "2"])
    _names_the_field(rc, out, [key])
    out_file = p.parent / "g.json"
    rc, out = _run(capsys, ["export-graph", "--model", "linear", "--device", str(p), "--out", str(out_file)])
    _names_the_field(rc, out, [key])


def test_the_check_itself_sees_a_refusal_that_names_the_field(tmp_path, capsys, graph_dict):
    g = json.loads(json.dumps(graph_dict))
    g["nodes"][1]["ram_bytes"] = -5
    p = tmp_path / "g.json"
    p.write_text(json.dumps(g))
    rc, out = _run(capsys, ["solve", "--graph", str(p), "--memory", "80%", "--time-limit", "2"])
    assert rc != 0
    _names_the_field(rc, out, ["ram_bytes"])
    with pytest.raises(AssertionError, match="refused without naming"):
        _names_the_field(rc, out, ["no_such_key"])
