"""formats.jsontext: the same JSON as json.dumps, laid out one item per line at the outer levels."""
import json

from rankmap.formats.jsontext import dumps


def test_same_document_one_rank_per_line():
    doc = {"format": "x", "mapping": {str(r): {"node": r // 8, "gpu": r % 8, "cpus": None} for r in range(16)},
           "links": [{"a": 1, "b": [1, 2]}, {"a": 2, "b": []}], "empty": {}, "notes": [], "n": 1.5}
    text = dumps(doc)
    assert json.loads(text) == doc
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and text.endswith("}\n")
    assert ' "0": {"node": 0, "gpu": 0, "cpus": null},' in [l[1:] for l in lines]
    assert sum(1 for l in lines if '"node":' in l) == 16          # one line per rank
    assert ' "empty": {},' in lines and ' "notes": [],' in lines


def test_depth_zero_is_one_line_and_odd_values_are_text():
    from pathlib import Path

    assert dumps([1, {"a": Path("/x")}], depth=0) == '[1, {"a": "/x"}]\n'
    assert json.loads(dumps({1: [1, 2]})) == {"1": [1, 2]}
