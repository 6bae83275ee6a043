"""The capture-hazard checker: what will a replay get wrong, read from a trace alone.

``check(trace)`` takes plain records (simulated by simlib or recorded from
real PyTorch by gpu_demo) and returns one ``Finding`` per hazard: failed
captures first, then by host step. It never needs the engine's objects: tensor
ids, pointers, steps, graph edges and allocator blocks are all in the trace.
One module per rule (``rule_*``), over one index of the trace (``index``); the
findings and their report are in ``findings``; every rule's number, code,
severity and modes in one table, ``rules.RULES``.

Rules (severity ``error``: wrong on every replay, or no graph at all;
``warning``: right or wrong by what happens later: two accesses to the same
memory that nothing orders (3, 4), or host state a capture changed (16)):

0. ``capture_failed`` (error): a capture ended with an error, so there is no
   graph. It is reported first, with what the error means; a graph that never
   existed gets no other finding (no races, nothing frozen).
1. ``host_mutation`` (error): during a capture, the host changed a tensor's
   metadata (``set_``, ``resize_``) and then used it: a captured launch or an
   op that launched nothing, a host read of its changed shape (``x.shape``,
   ``numel()``: host code branches on it, so the op it guards may leave no
   node at all), or, when nothing else used it, a view taken of it afterwards.
   Replays never rerun host code, so they all get what the host did after the
   change. (A change before the capture is seen alike by the capture and by
   eager runs, so it is not one.)
2. ``empty_argument`` (error): a captured launch, or an op that launched
   nothing because its outputs were empty, got a tensor empty (0 elements)
   or null (pointer 0) although the same tensor was non-empty earlier in the
   capture. A view of an emptied tensor counts as that tensor. Reported once
   per tensor, at its first such launch.

   Rules 1 and 2 say, for each consumer, what the graph holds for it in the
   words of ``simlib.glossary.GRAPH_HOLDS``: a node whose frozen pointer is 0
   (a raw kernel: replays fault), no node at all (PyTorch launched nothing:
   the output keeps what it held), or, for a host read, only what host code
   issued after branching on the emptied shape.
3. ``cross_stream_race`` (warning): two nodes of one graph touch overlapping
   addresses, at least one writes, and no path in the graph (``Launch.deps``)
   orders them.
4. ``reuse_after_free`` (warning): the same, where the two nodes straddle a
   free during capture of a block covering the overlap: the later node uses
   the block the graph's pool handed out again while the earlier one may
   still be using the old contents. Reported once per free, never as rule 3.
5. ``stale_input`` (error): a replay ran with no eager write into one of the
   graph's static inputs since the capture ended or the previous replay.
6. ``extent_exceeds_storage`` (error): a captured launch touches more bytes at
   an argument (``Arg.nbytes``: the span its view can touch from its pointer, by
   its sizes and strides, or a raw kernel's declared size)
   than lie behind its pointer (``Arg.storage_nbytes``; none behind pointer
   0): every replay reads past the end into neighbouring data, writes over it,
   or faults at address 0. An argument rule 2 reports is not reported again:
   rule 2 names the cause (emptied during the capture), this rule covers every
   other way a pointer ends up short of its extent.
7. ``frozen_state`` (error): the graph reads an address range that no captured
   node writes and that eager launches before the capture (the warm-up) wrote
   with data derived from the graph's static inputs (``Capture.inputs``;
   derived: written by an eager launch that read such data, followed in
   record order; a freed or reallocated block holds nothing). Every replay
   reads the warm-up's value, whatever its input. The finding names the
   warm-up op that wrote it and, when the capture emptied a tensor before the
   graph's first read, that mutation as what stopped the capture writing it
   (with the op that then launched nothing, or the host read of the emptied
   shape that skipped it). Ranges written eagerly after the capture began
   (refreshed like an input) are not reported; a constant computed from
   nothing input-derived is not either (ops that read only a template's
   shape, ``*_like`` and ``new_*``, derive nothing from it).

Rules 8 and 9 compare the calls of the code under check (``Call`` records:
warm-up and eager calls, then the capture's call), launch by launch, lined up
by ``(site, kernel, n)`` (``calls``):

8. ``frozen_host_value`` (error): a captured launch has a non-tensor argument
   (``Launch.scalars``: a Python float, a host int that sizes a kernel) whose
   value took two or more values over the earlier calls and the capture's
   call at the same launch: the graph froze the one it had at capture, and
   every replay uses it. A value constant across calls is fine, and so is a
   loop that passes each layer its own constant (each is its own launch).
   Calls in which that launch read tensors of other shapes belong to another
   graph (one per batch size) and are not compared.
9. ``input_rebuilt`` (error): a captured launch reads a tensor that a
   host-to-device copy (``Launch.role == "h2d"``) wrote in the capture's
   call, and in two or more earlier calls that launch read, at that argument,
   a different tensor each call, each copied from the host in its own call:
   the program rebuilds the input every call, and the graph keeps re-reading
   the capture's tensor and copy source.
10. ``freed_under_graph`` (error): a block a graph's node reads or writes,
    outside the graph's pool (allocated before the capture), is freed during
    the capture, or after it while replays of the graph follow: the allocator
    may hand it to anyone, and the replays use it. Reported at the free, with
    the graph, the replays that follow, and who got the block next. Every
    block counts: pointer 0 and small addresses are not skipped.
11. ``graphs_clobber`` (error): a replay of graph B writes graph-pool memory
    holding a live result of graph A (written by A's last replay and read
    afterwards, by an eager launch or another graph's replay, A's own next
    replay reading it back as state included, before A writes it again):
    graphs sharing a pool (``Capture.pool``), a cache created lazily in
    capture. Reported at B's replay, naming both graphs.

The incident family as it stands in 2026 (``simlib.programs.gallery``) adds six
rules. Each says what the recorder of real runs must write for it (the
simulator writes it all); the guard modes that can fire each are in ``rules``.

13. ``output_overwritten`` (error): a result of graph G the program still holds
    from one replay is read after a later replay of G rewrote it: a view of G's
    result taken after replay k, read by an eager launch after a later replay,
    while the program took another view of it in a later epoch (it keeps one
    reference per step); or one eager launch whose tensor-list argument
    (``Arg.element_of``) holds two elements on the same bytes of G's result after
    G replayed twice (``torch.stack(outs)`` of a static output appended every
    step, TransformerEngine's static outputs of ``make_graphed_callables``).
    Reported at the read, on the reader's stream, once per graph. Reading the
    output right after each replay, or through one view taken once, is clean
    (``rule_output_overwritten`` says what it cannot tell). Needs ``View``
    records of eager views and list arguments.
14. ``weights_rebound`` (error): an owner's attribute that a graph's node uses
    (a module's parameter or buffer) was rebound to another tensor after the
    capture (``Rebind``: RL weight sync, reload, a LoRA swap), and the graph
    replayed: it keeps the old tensor's address, whether the old tensor is
    alive or freed. Reported at the rebind's step, found at the graph's next
    replay, naming the graph, the attribute and both pointers; rule 10 yields
    for the old tensor's free. Needs ``Rebind`` records, written before the
    attribute changes (``nn.Module.__setattr__``, ``register_parameter``,
    ``register_buffer``).
15. ``view_frozen`` (error): a captured launch was handed a view (``x[:n]``, a
    cache row ``cache[pos]``) whose offset, size or strides (``Arg.ptr``,
    ``shape``, ``nbytes`` on the same storage end) took two or more values over
    the earlier calls and the capture's call, compared as rule 8 compares
    scalars, in calls whose launch differs from the captured one at that
    argument alone (so a graph per batch size is not a frozen view;
    ``rule_view_frozen`` says why that is sound). Reported at the captured
    launch, with its site. Needs what rule 8 needs.
16. ``host_state_branch`` (warning): a host int or flag of an object the
    captured code reached changed during the capture (``HostState``: a counter
    the captured call advances, a flag a shortcut sets), so every replay keeps
    the capture's value and whatever branch host code took on it. Reported at
    the capture's end, with the line that changed it. Needs the recorder to
    snapshot the ints and bools of the objects reachable from the capturing
    frame's locals when the capture begins and ends (``HostState``, written
    before the ``Capture`` end).
17. ``unregistered_generator`` (error): a captured random op draws from a
    generator the graph does not advance (``("generator", name)`` among its
    scalars, neither the default CUDA generator nor in ``Capture.generators``),
    so every replay draws the capture's numbers. Reported at the node, once per
    generator. Needs the generator of random ops and the generators registered
    with the graph (``register_generator_state``).
18. ``input_fresh_between_graphs`` (error): graph B reads a range that an eager
    launch (site ``s``, kernel ``k``) wrote before B's capture; after the capture,
    before a replay of B, the same launch wrote a tensor of that size elsewhere
    and nothing wrote the range B reads: the op between piecewise graphs made B
    a new input that B never sees. Reported at B's replay, once per graph and
    launch. Needs ``Launch.site`` on eager launches.

Across the ranks of one job, ``check_ranks(traces)`` (one trace per rank,
``meta["rank"]``) runs ``check`` on each and then:

12. ``collective_mismatch`` (error): the ranks of one group captured different
    collective sequences (``c10d`` launches in their n-th capture): a different
    order, count, op, size or dtype, or a collective in a branch taken on one
    rank only. Every replay then waits for a partner that never comes or
    combines buffers that do not match (``rule_cross_rank``).
"""

from __future__ import annotations

from typing import Sequence

from ..trace import Trace
from .calls import calls_of
from .findings import ERROR, WARNING, Finding, format_report
from .incremental import IncrementalChecker, call_rules
from .ranks import RankFinding, format_rank_report
from .rule_cross_rank import collective_mismatches, rank_of
from .rule_frozen_state import frozen_state
from .rules import CAPTURE_FAILED, RULES, Rule
from .sites import located

__all__ = ["ERROR", "RULES", "WARNING", "Finding", "IncrementalChecker", "RankFinding", "Rule", "check", "check_ranks",
           "format_rank_report", "format_report"]


def check(trace: Trace) -> list[Finding]:
    """Every capture hazard in ``trace``: failed captures first, then by step (empty: clean)."""
    checker = IncrementalChecker()
    findings = checker.feed(trace.records)
    findings += frozen_state(checker.index)
    findings += call_rules(calls_of(trace), checker.index)
    findings += checker.finish()
    return sorted(located(findings, trace.records),
                  key=lambda f: (f.rule != CAPTURE_FAILED.number, f.step, f.rule, f.label, f.pointers, f.why))


def check_ranks(traces: Sequence[Trace]) -> list[RankFinding]:
    """Every hazard of a multi-rank job: each rank's own (``check``), by rank, then rule 12 across them."""
    ordered = sorted(traces, key=rank_of)
    found = [RankFinding((rank_of(t),), f) for t in ordered for f in check(t)]
    ranks = tuple(rank_of(t) for t in ordered)
    return found + [RankFinding(ranks, f) for f in collective_mismatches(ordered)]
