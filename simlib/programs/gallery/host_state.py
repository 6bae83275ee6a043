"""Programs whose capture froze host state: a view a host int sizes, a host counter a cache advances, a
generator's state the graph does not advance."""

from __future__ import annotations

from ...engine.runtime import Runtime
from ..harness import Build, Program
from .case import refreshed
from .frozen import H

MAX_LEN = 16      # the static cache's rows
WINDOW = 4        # the sliding window's rows


def view_sliced(fixed: bool) -> Build:
    """Attention over a static cache sliced by a host int, the sequence length (``cache[:n]`` with
    ``n = int(lengths_cpu[0])``), which grows every step.

    Fixed: attention reads the whole cache and the length from a static device buffer, filled before
    every call and replay, and masks past it.
    """
    def build(rt: Runtime) -> Program:
        q, length = rt.empty((1, H), "q"), rt.empty((1,), "length", itemsize=4)
        cache = rt.from_host((MAX_LEN, H), "kv_cache", value="kv")
        host = {"n": 0}

        def feed(k: int) -> None:
            refreshed(rt, q, "q", k)
            host["n"] = k                                   # int(lengths_cpu[0]): one more token each step
            if fixed:
                refreshed(rt, length, "len@", k)

        def forward():
            if fixed:
                return rt.op("attend_masked", q, cache, length, out_shape=(1, H), label="attn")
            seen = rt.view(cache, (host["n"], H), label="kv_cache[:n]")
            out = rt.op("attend", q, seen, out_shape=(1, H), label="attn")
            rt.release(seen)
            return out
        return Program(forward, feed, [q, length] if fixed else [q])
    return build


def host_counter(fixed: bool) -> Build:
    """A sliding-window cache layer that counts the tokens it has seen in a host int its captured
    ``update`` advances (transformers 5's ``StaticSlidingWindowLayer.cumulative_length_int``), and
    appends while the window fills, rolls once it is full.

    Fixed: the count lives on the device, like ``StaticLayer``'s: one kernel reads it and picks the
    branch, another advances it, so every replay does both.
    """
    def build(rt: Runtime) -> Program:
        x, cache = rt.empty((1, H), "x"), rt.zeros((WINDOW, H), "window_cache")
        layer = rt.host_object("layers.0", cumulative_length_int=0)
        seen = rt.zeros((1,), "cumulative_length", itemsize=4)

        def forward():
            if fixed:
                rt.launch("update_by_count", reads=[cache, x, seen], writes=[cache], label="update")
                rt.launch("count", reads=[seen], writes=[seen], label="cumulative_length += 1")
            else:
                full = layer.cumulative_length_int >= WINDOW
                rt.launch("roll_append" if full else "append", reads=[cache, x], writes=[cache], label="update")
                layer.cumulative_length_int += 1
            return rt.op("attend", x, cache, out_shape=(1, H), label="attn")
        return Program(forward, lambda k: refreshed(rt, x, "x", k), [x])
    return build


def private_generator(fixed: bool) -> Build:
    """A decode step's sampler drawing from its own generator, whose state the capture read once.

    Fixed: that generator is registered with the graph (``graph.register_generator_state``) and drawn
    from by a kernel that reads its state through the graph.
    """
    def build(rt: Runtime) -> Program:
        x = rt.empty((4, H), "x")
        rng = rt.Generator("sampler-rng")

        def forward():
            logits = rt.op("lm_head", x, out_shape=(4, H), label="logits")
            out = rt.random("gumbel_sample", logits, out_shape=(4, H), generator=rng, label="scores")
            rt.release(logits)
            return out
        return Program(forward, lambda k: refreshed(rt, x, "x", k), [x], generators=[rng] if fixed else [])
    return build
