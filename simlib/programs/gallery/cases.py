"""The gallery's cases: each incident's threads, story, PyTorch lines, simulated programs and expectations."""

from __future__ import annotations

from ...checker.rules import (
    FREED_UNDER_GRAPH,
    FROZEN_HOST_VALUE,
    GRAPHS_CLOBBER,
    HOST_STATE_BRANCH,
    INPUT_FRESH_BETWEEN_GRAPHS,
    INPUT_REBUILT,
    OUTPUT_OVERWRITTEN,
    UNREGISTERED_GENERATOR,
    VIEW_FROZEN,
    WEIGHTS_REBOUND,
)
from ...glossary import CORRECT, SILENT_WRONG
from . import between_graphs, freed, frozen, host_state, outputs
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
    build=freed.workspace_freed_in_capture, expected={ONE_ORDER: SILENT_WRONG}, rules=(FREED_UNDER_GRAPH.code,))

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
        "self.buffer = self.buffer.to(..., copy=True), a scale that never changes). The capture froze "
        "a copy from the tensor bound then, which had no reference left afterwards and was freed "
        "during the capture: every replay copies from that freed block, and the allocator hands it "
        "to whatever asks next (here the next call's input), so the replays scale by its bytes. "
        "Until something takes the block they still read the old scale: on the H200 run of the twin "
        "nothing had, and it came out correct, by luck."),
    pytorch=(
        "def forward(self, x):\n"
        "    self.buf = self.buf.to(x.dtype, copy=True)   # re-bound: a new tensor every call\n"
        "    return x * self.buf\n"),
    pytorch_fix=(
        "def forward(self, x):\n"
        "    self.buf.copy_(self.source)                  # one buffer for life, updated in place\n"
        "    return x * self.buf\n"),
    build=frozen.buffer_rebound, expected={ONE_ORDER: SILENT_WRONG}, rules=(FREED_UNDER_GRAPH.code,))

# The family as it stands in 2026 (issue 36), each with its PyTorch twin in gpu_demo.lab.corpus.

WEIGHTS_SYNC = Case(
    name="weights_rebound_after_sync", fix="fix_weights_copied_in_place",
    threads=("vLLM #48251", "vLLM #40390", "vLLM RFC #48941", "SGLang #4961", "SGLang #27140", "SGLang #32718",
             "PEFT #2611"),
    story=(
        "An RL trainer syncs new weights into the inference engine between steps, and the engine replays "
        "decode graphs captured at start-up. The sync replaces the module's parameter with a new tensor "
        "(module.weight = nn.Parameter(new)); a reload, a process_weights_after_loading step, a memory-saver "
        "resume or a LoRA swap can do the same. A graph holds the address it was captured with, not the "
        "attribute: every replay after the sync computes with the old weights, or, once the old tensor is "
        "freed, with whatever the allocator put in its block since. Nothing fails; the rollouts come from "
        "a stale policy."),
    pytorch=(
        "def sync_weights(model, new_state):\n"
        "    for name, new in new_state.items():\n"
        "        setattr(model.get_submodule(owner(name)), leaf(name), nn.Parameter(new))   # a new tensor\n"
        "graph.replay()                     # still reads the old weight's address\n"),
    pytorch_fix=(
        "with torch.no_grad():\n"
        "    for name, new in new_state.items():\n"
        "        model.get_parameter(name).copy_(new)       # into the captured parameter, in place\n"),
    build=frozen.weights_synced, expected={ONE_ORDER: SILENT_WRONG}, rules=(WEIGHTS_REBOUND.code,))

LOGITS_KEPT = Case(
    name="logits_kept_without_clone", fix="fix_logits_cloned",
    threads=("PyTorch #181723", "TransformerEngine #2937", "PyTorch #154306"),
    story=(
        "A generate loop keeps each step's logits in a list (output_scores) and stacks them at the end. Each "
        "step's logits are the decode graph's static output: the list holds the same memory once per step, "
        "and every replay writes it again, so the stacked scores are the last step's, repeated. The same "
        "holds for the static outputs and gradient buffers make_graphed_callables returns, kept across calls. "
        "Each token sampled right after its replay was right, so generation looks fine; the scores are wrong."),
    pytorch=(
        "scores = []\n"
        "for step in range(steps):\n"
        "    static_input.copy_(next_hidden); graph.replay()\n"
        "    scores.append(static_logits)          # the graph's output: rewritten by the next replay\n"
        "torch.stack(scores)\n"),
    pytorch_fix=(
        "    scores.append(static_logits.clone())  # this step's values, in memory of its own\n"),
    build=outputs.logits_kept, expected={ONE_ORDER: SILENT_WRONG}, rules=(OUTPUT_OVERWRITTEN.code,))

VIEW_SLICED = Case(
    name="view_sliced_by_host_length", fix="fix_length_in_device_tensor",
    threads=("transformers #45274",),
    story=(
        "Attention reads a static KV cache up to the current length, cache[:n], with n a Python int "
        "(int(lengths_cpu[0])) that grows by one every step. A slice is host metadata, a pointer and sizes "
        "read on the host at launch like a scalar, and it is not part of the graph's key: the graph froze "
        "the slice of the capture's step, and every replay attends over that many positions, however long "
        "the sequence is now. The same happens to a nanoGPT-style cache indexed by a Python self.pos."),
    pytorch=(
        "n = int(lengths_cpu[0])                          # one more every step\n"
        "out = attention(q, self.k_cache[:n], self.v_cache[:n])\n"),
    pytorch_fix=(
        "self.length.fill_(n)                             # a static device tensor, before each replay\n"
        "out = attention(q, self.k_cache, self.v_cache, mask=positions < self.length)\n"),
    build=host_state.view_sliced, expected={ONE_ORDER: SILENT_WRONG}, rules=(VIEW_FROZEN.code,))

HOST_COUNTER = Case(
    name="host_counter_in_capture", fix="fix_counter_on_device",
    threads=("transformers 5 StaticSlidingWindowLayer", "vLLM #52492"),
    story=(
        "A sliding-window cache layer counts the tokens it has seen in a Python int that its update advances "
        "(cumulative_length_int += kv_length) and appends while the window fills, rolls once it is full. The "
        "capture ran the update once: the graph holds the branch the count picked then, and the count, which "
        "no replay advances, never reaches the window. Once a real step would roll, every replay appends at "
        "the wrong place. The full-attention layer keeps its count on the device and is fine; a host shortcut "
        "taken only at capture fails alike."),
    pytorch=(
        "def update(self, key_states, ...):\n"
        "    if self.cumulative_length_int >= self.window:  # a host branch, taken at capture only\n"
        "        ...roll the cache, write the last row...\n"
        "    else:\n"
        "        ...write row cumulative_length_int...\n"
        "    self.cumulative_length_int += key_states.shape[-2]\n"),
    pytorch_fix=(
        "self.cumulative_length += key_states.shape[-2]     # a device tensor: each replay advances it\n"
        "index = torch.where(self.cumulative_length >= self.window, ...)   # the branch on the device\n"),
    build=host_state.host_counter, expected={ONE_ORDER: SILENT_WRONG}, rules=(HOST_STATE_BRANCH.code,))

GENERATOR = Case(
    name="generator_not_registered", fix="fix_generator_registered",
    threads=("Megatron-LM #5697", "Megatron-LM #5791", "SGLang-omni #415"),
    story=(
        "A captured decode step samples from its sampler's own CUDA generator, not the default one: the host "
        "reads the generator's seed and offset (FlashInfer's get_seed_and_offset) and hands them to the "
        "sampling kernel as two integers. A graph advances the default generator on every replay, and any "
        "generator registered with it, through the graph; this state was read once, at capture, and frozen "
        "into the kernel. Every replay samples with the same noise: decoding goes on, and nothing fails."),
    pytorch=(
        "seed, offset = get_seed_and_offset(n, sampler_generator)   # host ints, read at capture\n"
        "noise = sampling_kernel(logits, seed, offset)              # every replay: the capture's noise\n"),
    pytorch_fix=(
        "graph.register_generator_state(sampler_generator)          # before capturing\n"
        "noise = torch.rand(logits.shape, generator=sampler_generator)   # the kernel reads the state\n"),
    build=host_state.private_generator, expected={ONE_ORDER: SILENT_WRONG}, rules=(UNREGISTERED_GENERATOR.code,))

DRAFTER = Case(
    name="drafter_shared_pool", fix="fix_drafter_output_copied",
    threads=("vLLM #53488", "vLLM #53520"),
    story=(
        "Speculative decoding: the target model's decode graph and the draft model's graph are captured into "
        "one memory pool, and the target's logits are kept as a weak reference, so the draft's capture may "
        "take their memory. Each step replays the target, hands its hidden state to the draft, replays the "
        "draft, then verifies the draft's tokens against the target's logits: by then the draft's replay has "
        "written its own output over them, and the verification compares the draft with itself."),
    pytorch=(
        "with torch.cuda.graph(g_target): logits = target(tokens)\n"
        "logits = weak_ref_tensors(logits)\n"
        "with torch.cuda.graph(g_draft, pool=g_target.pool()): draft_logits = draft(draft_hidden)\n"
        "g_target.replay(); g_draft.replay(); verify(logits)   # logits' block now holds the draft's output\n"),
    pytorch_fix=(
        "g_target.replay(); target_logits = logits.clone()   # copied out before the draft replays\n"
        "g_draft.replay(); verify(target_logits)\n"),
    build=between_graphs.drafter, script=between_graphs.target_then_draft,
    expected={between_graphs.VERIFY_LATER: SILENT_WRONG}, rules=(GRAPHS_CLOBBER.code,), shows="draft",
    notes={between_graphs.VERIFY_LATER: "the draft's replay overwrites the target's logits before they are verified"})

OP_BETWEEN = Case(
    name="op_between_pieces_fresh", fix="fix_op_writes_static_input",
    threads=("vLLM #53915",),
    story=(
        "Piecewise CUDA graphs capture the model in pieces and run some ops eagerly between them. The op "
        "between two pieces returns a fresh tensor every step, and the next piece reads it: that piece was "
        "captured reading the fresh tensor of the capture's step, and keeps reading that address. The "
        "program made the piece a new input every step that the piece never sees; once the old tensor is "
        "dropped, the allocator hands its block to the next step's result every other step, so the piece "
        "reads a result that is one step old, or right by luck."),
    pytorch=(
        "h = attention_piece(x)                  # a captured piece\n"
        "act = silu_and_mul(h)                   # eager, between pieces: a fresh tensor every step\n"
        "out = mlp_down_piece(act)               # captured with the capture step's act\n"),
    pytorch_fix=(
        "silu_and_mul(h, out=static_act)         # into the tensor the next piece was captured with\n"),
    build=between_graphs.op_between_pieces, script=between_graphs.piece_by_piece,
    expected={"attention, op between, mlp_down": SILENT_WRONG},
    rules=(INPUT_FRESH_BETWEEN_GRAPHS.code, FREED_UNDER_GRAPH.code), shows="mlp_down",
    notes={"attention, op between, mlp_down": "the second piece reads the activation of the capture's step"})

CASES: dict[str, Case] = {c.name: c for c in (HOST_SCALAR, INPUT_REBUILT, WORKSPACE_RESIZED, WORKSPACE_FREED,
                                              SHARED_POOL, LAZY_CACHE, BUFFER_REBOUND, WEIGHTS_SYNC, LOGITS_KEPT,
                                              VIEW_SLICED, HOST_COUNTER, GENERATOR, DRAFTER, OP_BETWEEN)}
