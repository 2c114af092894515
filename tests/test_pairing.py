"""Requests met with their answers within one input: rmq._core.RequestPairer against
its reference rmq.fallback.pairing.RequestPairer (the same tests on both, and
Hypothesis comparing them), and the rule the analysis relies on: pairing again every
frame of the keys a file left open gives what pairing the whole trace at once gives."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.rows import MAX_WAITING, PAIRED_ROW_FIELDS, TRACE_ROW_FIELDS
from rmq.protocol import IN, OUT

F = {name: i for i, name in enumerate(PAIRED_ROW_FIELDS)}
REQUEST, ANSWER, ONEWAY = "request", "answer", "oneway"


def row(kind, conn, opaque, t, *, record=0, code=None, remark=None, error=None, direction=None):
    """A trace row as the decode makes it."""
    flag = {REQUEST: 0, ONEWAY: 2, ANSWER: 1}[kind]
    if direction is None:
        direction = OUT if kind == ANSWER else IN
    if code is None:
        code = 0 if kind == ANSWER else 105
    if error is not None:
        return ("f", 0, record, t, conn, "p", direction, None, None, None, None, None, None,
                None, None, 9, error)
    return ("f", 0, record, t, conn, "p", direction, code, flag, opaque, "JAVA", 409, remark,
            None, 0, 30, None)


def paired(impl, rows, **kw):
    return list(impl.RequestPairer(rows, **kw))


def answer_of(out_row):
    return out_row[F["answer_time_ns"]:]


def by_record(out):
    return {r[F["record"]]: r for r in out}


def numbered(rows):
    return [r[:2] + (i,) + r[3:] for i, r in enumerate(rows)]


def test_a_request_carries_its_answer_and_both_are_settled(impl):
    rows = numbered([row(REQUEST, 1, 5, 100), row(ANSWER, 1, 5, 130, code=17, remark="no")])
    out = paired(impl, rows)
    assert [r[:len(TRACE_ROW_FIELDS)] for r in out] == rows
    assert answer_of(out[0]) == (130, 17, "no", False)
    assert answer_of(out[1]) == (None, None, None, False)


def test_the_next_request_of_an_opaque_leaves_the_one_before_unanswered(impl):
    rows = numbered([row(REQUEST, 1, 5, 100), row(REQUEST, 1, 5, 110), row(ANSWER, 1, 5, 120)])
    got = by_record(paired(impl, rows))
    assert answer_of(got[0]) == (None, None, None, False)
    assert answer_of(got[1]) == (120, 0, None, False)


def test_connections_and_opaques_are_kept_apart(impl):
    rows = numbered([row(REQUEST, 1, 5, 100), row(REQUEST, 2, 5, 101), row(REQUEST, 1, 6, 102),
                     row(ANSWER, 2, 5, 103, code=2), row(ANSWER, 1, 6, 104, code=3),
                     row(ANSWER, 1, 5, 105, code=1)])
    got = by_record(paired(impl, rows))
    assert [answer_of(got[i])[:2] for i in range(3)] == [(105, 1), (103, 2), (104, 3)]


def test_a_oneway_request_is_never_answered(impl):
    rows = numbered([row(ONEWAY, 1, 5, 100), row(ANSWER, 1, 5, 110)])
    got = by_record(paired(impl, rows))
    assert answer_of(got[0]) == (None, None, None, False)
    # the answer met no waiting request: its key is paired again across the files
    assert answer_of(got[1]) == (None, None, None, True)


def test_answers_that_met_no_request_are_open(impl):
    """An answer before any request, a duplicate; a request still waiting at the
    end is unanswered (its answer, in a later file, would be open there)."""
    rows = numbered([row(ANSWER, 1, 4, 90), row(REQUEST, 1, 5, 100), row(ANSWER, 1, 5, 110),
                     row(ANSWER, 1, 5, 120), row(REQUEST, 1, 6, 130)])
    got = by_record(paired(impl, rows))
    assert [got[i][F["pair_open"]] for i in range(5)] == [True, False, False, True, False]
    assert answer_of(got[4]) == (None, None, None, False)


def test_rows_that_are_no_request_or_answer_pass_through(impl):
    rows = numbered([
        row(REQUEST, 1, 5, 100, error="CorruptFrame: cut"),
        row(ANSWER, 1, 5, 101, direction=IN),            # an answer to the NameServer
        row(REQUEST, 1, 5, 102, direction=OUT),          # a request from it
        row(REQUEST, 1, 5, 103)])
    out = paired(impl, rows)
    assert [r[F["record"]] for r in out] == [0, 1, 2, 3]
    assert [answer_of(r) for r in out[:3]] == [(None,) * 4] * 3
    assert [r[:len(TRACE_ROW_FIELDS)] for r in out] == rows


def test_past_max_waiting_every_waiting_request_is_let_go(impl):
    rows = numbered([row(REQUEST, 1, o, 100 + o) for o in range(5)]
                    + [row(ANSWER, 1, o, 200 + o) for o in range(5)])
    got = by_record(paired(impl, rows, max_waiting=3))
    # requests 0-2 were let go unanswered when request 3 came: their answers are
    # open, to be paired again; 3 and 4 met theirs
    assert [answer_of(got[i])[0] for i in range(5)] == [None, None, None, 203, 204]
    assert [got[i][F["pair_open"]] for i in range(5)] == [False] * 5
    assert [got[5 + i][F["pair_open"]] for i in range(5)] == [True, True, True, False, False]
    assert len(got) == 10
    with pytest.raises(ValueError, match="max_waiting must be at least 1, got 0"):
        impl.RequestPairer([], max_waiting=0)
    assert MAX_WAITING >= 1024


@pytest.mark.parametrize("bad", [("short",), ["a list"] * 17, None])
def test_a_row_that_is_not_a_trace_row_is_a_type_error(impl, bad):
    with pytest.raises(TypeError, match="a trace row is a tuple of 17 fields"):
        paired(impl, [row(REQUEST, 1, 5, 100), bad])


def test_an_empty_input_and_a_finished_pairer(impl):
    assert paired(impl, []) == []
    p = impl.RequestPairer(iter([row(REQUEST, 1, 5, 100)]))
    assert len(list(p)) == 1 and list(p) == []


# ---------------------------------------------------------------- random inputs

EVENT = st.tuples(st.sampled_from([REQUEST, REQUEST, ANSWER, ANSWER, ONEWAY]),
                  st.integers(1, 3), st.integers(0, 3))


def events_rows(events):
    return numbered([row(kind, conn, opaque, 1000 + i) for i, (kind, conn, opaque)
                     in enumerate(events)])


@settings(max_examples=300, deadline=None)
@given(st.lists(EVENT, max_size=60), st.integers(1, 8))
def test_compiled_pairs_as_the_reference(compiled, fallback, events, max_waiting):
    rows = events_rows(events)
    assert paired(compiled, rows, max_waiting=max_waiting) == \
        paired(fallback, rows, max_waiting=max_waiting)


def whole_trace_answers(rows):
    """The rule on the whole sequence at once: record -> its answer row's record
    (None: unanswered), for each request."""
    out, last = {}, {}
    for r in rows:
        key = (r[F["conn"]], r[F["opaque"]])
        is_request = r[F["direction"]] == IN and not r[F["flag"]] & 1
        before = last.get(key)
        if before is not None and not is_request and not before[F["flag"]] & 2:
            out[before[F["record"]]] = r[F["record"]]
        if is_request:
            out[r[F["record"]]] = None
        last[key] = r if is_request else None
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(EVENT, max_size=80), st.lists(st.integers(0, 80), max_size=4),
       st.integers(1, 8))
def test_pairing_open_keys_again_gives_the_whole_traces_answers(impl, events, cuts, max_waiting):
    """Split the trace into files, pair each, then pair every frame of the open keys
    again in order (what requests_table does): the same answers as the whole trace."""
    rows = events_rows(events)
    edges = sorted({0, len(rows), *[min(c, len(rows)) for c in cuts]})
    out = []
    for a, b in zip(edges, edges[1:]):
        out += paired(impl, rows[a:b], max_waiting=max_waiting)
    assert sorted(r[F["record"]] for r in out) == list(range(len(rows)))
    open_keys = {(r[F["conn"]], r[F["opaque"]]) for r in out if r[F["pair_open"]]}
    got = {}
    for r in out:
        if r[F["direction"]] == IN and not r[F["flag"]] & 1 \
                and (r[F["conn"]], r[F["opaque"]]) not in open_keys:
            t = r[F["answer_time_ns"]]
            got[r[F["record"]]] = None if t is None else t - 1000
    again = whole_trace_answers(sorted((r[:len(TRACE_ROW_FIELDS)] for r in out
                                        if (r[F["conn"]], r[F["opaque"]]) in open_keys),
                                       key=lambda r: r[F["record"]]))
    assert not set(got) & set(again)
    got.update(again)
    assert got == whole_trace_answers(rows)
