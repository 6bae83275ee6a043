"""``gpu_demo.lab.measure.probe_recorder``'s CPU parts: the recorder on plain PyTorch programs, described."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import ALT, FakeGraph, cuda_graph, fake_graph_methods, fork, join, recording, streams  # noqa: E402

from gpu_demo.guard.record import patches  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name


# -- the GPU probe's CPU parts ------------------------------------------------------------------

def test_the_probe_describes_every_record_of_each_capture(streams, fake_graph_methods):
    from gpu_demo.lab.measure.probe_recorder import describe

    x, out = torch.randn(4, 8) * 1, torch.zeros(32)
    with recording(streams) as recorder:
        with cuda_graph(FakeGraph(), streams):
            fork()
            x.set_(torch.empty(0))
            with streams.on(ALT):
                x.shape
                patches.record_triton_launch("raw_load", [("src_ptr", x), ("dst_ptr", out)])
            join()
    lines = describe(recorder.trace).splitlines()
    assert lines[0] == "records: capture 2, event 4, free 1, host_read 1, launch 1, mutation 1"
    assert lines[1] == "graph 0 (captured on main):" and lines[-1] == "  replays: 0"
    assert [line.split()[1] for line in lines[2:-1]] == [
        "event", "event", "free", "mutation", "hostread", "launch", "event", "event"]
    # set_ emptied x, so the recording names it by the variable the caller holds it in, in every record
    assert f"src_ptr=x@0x0[0]rw, dst_ptr=t2@{out.data_ptr():#x}[32]rw" in lines[7]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_the_probe_without_a_gpu_says_so_and_exits_2(capsys):
    from gpu_demo.lab.measure.probe_recorder import main

    assert main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err

