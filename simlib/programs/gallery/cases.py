"""The gallery's cases: each incident's threads, story, PyTorch lines, simulated programs and expectations."""

from __future__ import annotations

from ...checker.rules import FREED_UNDER_GRAPH, FROZEN_HOST_VALUE, GRAPHS_CLOBBER, INPUT_REBUILT
from ...glossary import CORRECT, SILENT_WRONG
from . import between_graphs, freed, frozen
from .case import ONE_ORDER, Case

HOST_SCALAR = Case(
    name="host_scalar_frozen", fix="fix_host_scalar_in_tensor",
    threads=("vLLM #46913", "SGLang #29508"),
    story=(
        "A captured all-reduce takes a Python float that the host changes every step (a scale, a "
        "sequence number). A kernel's scalar arguments are read on the host at launch, like its "
        "pointers, so the capture froze the value of the capture's call: every replay reduces "
        "with it, whatever the host holds now. Eager runs and the warm-up were right, because "
        "each call launched with its own value."),
    pytorch=(
        "class Reduce(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        self.step += 1\n"
        "        return all_reduce(x, scale=1.0 / self.step)   # a Python float, new every call\n"),
    pytorch_fix=(
        "self.scale = torch.empty(1, device='cuda')            # a device tensor the graph reads\n"
        "self.scale.fill_(1.0 / step)                          # before every call and replay\n"
        "return all_reduce(x, scale=self.scale)\n"),
    build=frozen.host_scalar, expected={ONE_ORDER: SILENT_WRONG}, rules=(FROZEN_HOST_VALUE.code,))

INPUT_REBUILT = Case(
    name="input_rebuilt_each_call", fix="fix_input_copied_to_static",
    threads=("FlashInfer #3904", "vLLM #48167", "SGLang #26019"),
    story=(
        "Attention metadata (positions, a plan's indices) is rebuilt from host lists into a fresh "
        "device tensor every step. Under capture the pinned, non-blocking copy is legal: it becomes "
        "a node that copies from the capture's host buffer. The graph keeps that tensor and that "
        "source, so every replay rotates with the capture's positions, while the host builds new "
        "ones nobody reads."),
    pytorch=(
        "def forward(self, x, positions: list[int]):\n"
        "    pos = torch.tensor(positions).pin_memory().to('cuda', non_blocking=True)\n"
        "    return rope(x, pos)\n"),
    pytorch_fix=(
        "self.pos[:n].copy_(torch.tensor(positions).pin_memory(), non_blocking=True)   # outside the graph\n"
        "graph.replay()                                                                # reads self.pos\n"),
    build=frozen.input_rebuilt, expected={ONE_ORDER: SILENT_WRONG}, rules=(INPUT_REBUILT.code,))

WORKSPACE_RESIZED = Case(
    name="workspace_resized_under_graph", fix="fix_workspace_sized_once",
    threads=("FlashInfer #4398",),
    story=(
        "An attention wrapper keeps its plan in a workspace the host writes before every call. "
        "Graphs are captured per batch size; the bigger batch makes the wrapper grow the workspace "
        "with resize_, which moves it to a new block and frees the old one. The graph captured "
        "before still reads the old block: the allocator hands it out again, and that graph's "
        "replays read whatever lives there now instead of the plan."),
    pytorch=(
        "def plan(self, batch):\n"
        "    if self.workspace.numel() < need(batch):\n"
        "        self.workspace.resize_(need(batch))    # new storage; the old block is freed\n"
        "    self.workspace[:need(batch)].copy_(make_plan(batch))\n"),
    pytorch_fix=(
        "self.workspace = torch.empty(need(max_batch), device='cuda')   # once, before any capture\n"),
    build=freed.workspace_resized, script=freed.two_batch_sizes,
    expected={"bs1 bs8 bs1": SILENT_WRONG}, rules=(FREED_UNDER_GRAPH.code,),
    notes={"bs1 bs8 bs1": "every replay of the bs1 graph reads the freed block"})

WORKSPACE_FREED = Case(
    name="workspace_freed_in_capture", fix="fix_workspace_kept_alive",
    threads=("TensorRT-LLM #15534",),
    story=(
        "A plugin builds a table in its workspace on the first call and frees the workspace at the "
        "end of the captured call, as if the graph kept what it captured. The graph holds only the "
        "address: the block goes back to the allocator's default pool (it was allocated before the "
        "capture, so it is not the graph's), the next allocation takes it, and every replay reads "
        "that tensor's bytes as the table. Until some tensor takes the block, the replays still read "
        "the old table: the H200 run of the twin stayed correct, which is luck, not safety."),
    pytorch=(
        "y = gemm(x, self.workspace)\n"
        "if torch.cuda.is_current_stream_capturing():\n"
        "    del self.workspace                     # 'the graph has it now'\n"),
    pytorch_fix=(
        "y = gemm(x, self.workspace)                # kept as long as the graph is\n"),
    build=freed.workspace_freed_in_capture, expected={ONE_ORDER: SILENT_WRONG}, rules=(FREED_UNDER_GRAPH.code,),
    reuse_decides=True)

SHARED_POOL = Case(
    name="shared_pool_clobber", fix="fix_shared_pool_output_copied",
    threads=("vLLM #42177", "serving engines' one pool per batch size (pool=g1.pool())"),
    story=(
        "Serving engines capture one graph per batch size into one memory pool and keep each "
        "output as a weak reference, so the next capture may reuse that memory. Safe while each "
        "output is read before another graph replays; a runner that replays the bs1 graph, then "
        "the bs2 graph, then reads the bs1 output reads what the bs2 graph wrote there."),
    pytorch=(
        "with torch.cuda.graph(g1): out1 = model(x1)\n"
        "out1 = weak_ref_tensors(out1)\n"
        "with torch.cuda.graph(g2, pool=g1.pool()): out2 = model(x2)\n"
        "g1.replay(); g2.replay(); sample(out1)     # out1's block now holds g2's data\n"),
    pytorch_fix=(
        "g1.replay(); r1 = out1.clone()             # copy out before another graph replays\n"
        "g2.replay(); sample(r1)\n"),
    build=between_graphs.shared_pool,
    script=between_graphs.replay_order,
    expected={between_graphs.READ_LATER: SILENT_WRONG, between_graphs.READ_AT_ONCE: CORRECT},
    rules=(GRAPHS_CLOBBER.code,), shows="bs2",
    notes={between_graphs.READ_LATER: "the bs2 replay overwrites the bs1 output before it is read",
           between_graphs.READ_AT_ONCE: "each output is read before the other graph replays: correct"})

LAZY_CACHE = Case(
    name="lazy_cache_in_capture", fix="fix_cache_created_before_capture",
    threads=("transformers #48199",),
    story=(
        "A decoder creates its cache on first use, torch.zeros included. The first use happens "
        "inside the capture of the bs1 graph, so the cache lives in that graph's pool and its zero "
        "fill is a node of the graph: it never ran at capture (the bs2 graph's warm-up reads "
        "uninitialised memory), and it reruns on every bs1 replay, over what the bs2 graph "
        "appended since."),
    pytorch=(
        "def forward(self, x):\n"
        "    if self.cache is None:\n"
        "        self.cache = torch.zeros(max_len, hidden, device='cuda')   # first use: in capture\n"
        "    self.cache.index_copy_(0, pos, x)\n"
        "    return attend(x, self.cache)\n"),
    pytorch_fix=(
        "model.cache = torch.zeros(max_len, hidden, device='cuda')     # before any capture\n"),
    build=between_graphs.lazy_cache, script=between_graphs.captured_first,
    expected={"bs2 bs1 bs2": SILENT_WRONG}, rules=(GRAPHS_CLOBBER.code,),
    notes={"bs2 bs1 bs2": "the bs1 replay zeroes the cache the bs2 graph reads back"})

BUFFER_REBOUND = Case(
    name="buffer_rebound", fix="fix_buffer_copied_in_place",
    threads=("vLLM #11596",),
    story=(
        "A module assigns a new tensor to one of its buffers in forward, every call (vLLM #11596: "
        "a rope cache rebuilt and re-bound inside forward), while the host refreshes whichever "
        "tensor the attribute names before each call. The capture froze a copy from the tensor "
        "bound then, which had no reference left afterwards and was freed during the capture: "
        "every replay overwrites the refreshed buffer with the bytes of that freed block, which "
        "the allocator may hand to someone else (on the H200 run of the twin it had not yet: "
        "correct, by luck)."),
    pytorch=(
        "def forward(self, x):\n"
        "    self.buf = self.buf.to(x.dtype, copy=True)   # re-bound: a new tensor every call\n"
        "    return x * self.buf\n"
        "# before each call the host refreshes it: model.buf.copy_(new_values)\n"),
    pytorch_fix=(
        "def forward(self, x):\n"
        "    return x * self.buf                        # converted once, at load; refreshed in place\n"),
    build=frozen.buffer_rebound, expected={ONE_ORDER: SILENT_WRONG}, rules=(FREED_UNDER_GRAPH.code,),
    reuse_decides=True)

CASES: dict[str, Case] = {c.name: c for c in (HOST_SCALAR, INPUT_REBUILT, WORKSPACE_RESIZED, WORKSPACE_FREED,
                                              SHARED_POOL, LAZY_CACHE, BUFFER_REBOUND)}
