"""Every HTTP parameter of the dashboard's API, fuzzed (Hypothesis; profiles in tests/fuzzing.py).

One store holds a finished 8-rank job with link samples and a mapping, and a running job
(test_web_api.fill_store). Each endpoint is asked with hostile values in every one of its
parameters -- path and query alike: ids past int64, negative and non-decimal numbers, non-ASCII
digits, traversal paths, NUL bytes, any text -- and each answer must be a client's error or an
answer, never a server error (500: a traceback in the server's log), within a time limit and
without memory beyond a fixed allowance; an error names what was wrong in one line (or, for
FastAPI's own validation, the parameter it refused).
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

pytest.importorskip("fastapi", reason="the dashboard needs the web extra (fastapi)")

from hypothesis import example, given, settings, strategies as st  # noqa: E402

from fuzzing import bounded_memory, time_limit  # noqa: E402
from rankmap.store import open_store  # noqa: E402
from rankmap.web.app import create_app  # noqa: E402
from rankmap.web.security import Access  # noqa: E402
from test_web_api import TOPOLOGY, fill_store, local_client  # noqa: E402

#: values people and scripts get wrong, and values made to break a parser
ODD = ["latest", "0", "-1", "1", "2", "3", "9" * 30, str(2**63), str(2**31), "1e3", "0x10", "NaN", "inf", "",
       " ", "+1", "01", "１", "١٢", "../../etc/passwd", "/etc/passwd", "..%2f..%2fetc", "%00", "\x00", "a,b",
       "p2p,,all", "all", "p2p", "nccl", "mapped", "auto", "default", "dgx1-v100", "live", "bytes", "messages",
       "10,50,90", "90,10", "-5,200", "1," * 200, "<script>alert(1)</script>", "' OR 1=1 --", "é" * 50]
VALUE = st.one_of(st.sampled_from(ODD), st.text(max_size=40),
                  st.integers(-2**80, 2**80).map(str), st.floats(allow_nan=True).map(repr))
JOB = st.one_of(st.sampled_from(["1", "2", "latest"]), VALUE)

#: endpoint: (path template, {query parameter: repeated?}); ``{job}`` is the path's one parameter,
#: whose good value is "1" (the finished job; the benchmark run) unless GOOD says otherwise
GOOD = {"static": "app.js"}
ENDPOINTS = {
    "jobs": ("/api/jobs", {"limit": False}),
    "job": ("/api/jobs/{job}", {}),
    "matrix": ("/api/jobs/{job}/matrix", {"class": True, "what": False}),
    "ops": ("/api/jobs/{job}/ops", {}),
    "timeline": ("/api/jobs/{job}/timeline", {}),
    "cuda": ("/api/jobs/{job}/cuda", {}),
    "links": ("/api/jobs/{job}/links", {}),
    "pvars": ("/api/jobs/{job}/pvars", {"name": False}),
    "topology": ("/api/topology", {"spec": False, "job": False, "placement": False, "class": True}),
    "utilisation": ("/api/jobs/{job}/utilisation", {"spec": False, "bands": False, "placement": False}),
    "ledger": ("/api/jobs/{job}/ledger", {"spec": False, "placement": False}),
    "cluster": ("/api/jobs/{job}/cluster", {"spec": False, "bands": False}),
    "mapping": ("/api/jobs/{job}/mapping", {"spec": False, "id": False}),
    "machine": ("/api/machine", {"host": False}),
    "bench": ("/api/bench/{job}", {}),
    "static": ("/static/{job}", {}),
    "metrics": ("/metrics", {}),
}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz_http') / 'rankmap.db'}"
    fill_store(url)
    from test_bench_measured import p2p_run

    open_store(url).save_bench_run(p2p_run({(0, 1): 394.0, (1, 0): 390.0}, {0: 55.4}))      # run 1
    return local_client(create_app(open_store(url), TOPOLOGY))


def _params(draw, names: dict[str, bool]) -> list[tuple[str, str]]:
    out = []
    for name, repeated in names.items():
        for v in draw(st.lists(VALUE, max_size=3 if repeated else 1)):
            out.append((name, v))
    return out


def check_answer(r, asked: str) -> None:
    """A client's error or an answer, never the server's; an error says what was wrong in one line."""
    assert r.status_code < 500, (asked, r.status_code, r.text[:500])
    if r.status_code < 400:
        return
    body = r.json()
    detail = body.get("detail")
    if isinstance(detail, list):        # FastAPI's validation: each item names the parameter it refused
        assert detail and all(isinstance(d.get("loc"), list) and len(d["loc"]) >= 2 for d in detail), (asked, body)
    else:
        assert isinstance(detail, str) and detail and "\n" not in detail, (asked, body)
        assert "Traceback" not in detail, (asked, detail)


@pytest.mark.parametrize("name", list(ENDPOINTS))
@settings(max_examples=max(1, settings().max_examples // 2))     # 17 endpoints: half a profile's each
@given(data=st.data())
@example(data=None)
def test_every_parameter(client, name, data):
    template, names = ENDPOINTS[name]
    if data is None:                    # the plain request: the endpoint answers at all
        job, params = GOOD.get(name, "1"), []
    else:
        job, params = data.draw(JOB), _params(data.draw, names)
    path = template.format(job=quote(job, safe=""))
    asked = f"{path} {params!r}"
    # what one answer of this 8-rank store may take: far less than any matrix of 2**31 ranks
    with time_limit(20), bounded_memory(len(asked), allowance=64 << 20):
        r = client.get(path, params=params)
    check_answer(r, asked)
    if data is None:
        assert r.status_code == 200, (asked, r.text[:300])


@given(token=st.one_of(st.text(max_size=80), st.sampled_from(["", "Bearer", "Bearer ", "bearer x" * 100])),
       where=st.sampled_from(["header", "query"]))
def test_the_token_whatever_is_sent(tmp_path_factory, token, where):
    """A server with a token: any Authorization header (or a token= query) but the right one is a
    401 in one line, never a server error."""
    url = f"sqlite:///{tmp_path_factory.getbasetemp() / 'fuzz_token.db'}"
    app = create_app(open_store(url), TOPOLOGY, access=Access(token="s3cret-token-of-the-test",
                                                              hosts={"127.0.0.1"}))
    c = local_client(app)
    try:
        headers = {"Authorization": token} if where == "header" else {}
    except (UnicodeError, ValueError):
        return
    try:
        r = c.get("/api/jobs", headers=headers, params={"token": token} if where == "query" else None)
    except (UnicodeEncodeError, ValueError):     # a header no HTTP client can send (non-Latin-1, CR/LF)
        return
    assert r.status_code == 401, (token, r.status_code, r.text[:200])
    assert "\n" not in r.text.strip() and "token" in r.text, r.text
