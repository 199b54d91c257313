"""Host-to-GPU uploads that do not wait for the stream (layers/device.py): a stage's host inputs must reach the device
while a step queued ahead still runs, with the values the host had at the call even if it reuses its buffer at once.
And the download of a stage's result waits for its own stream only, not for another stage's work on the GPU.
Skipped without CUDA."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _busy(stream: torch.cuda.Stream) -> torch.Tensor:
    """Tens of milliseconds of work queued on `stream`."""
    with torch.cuda.stream(stream):
        x = torch.randn(4096, 4096, device="cuda")
        for _ in range(20):
            x = x @ x / 64
    return x


def _overlap_or_skip(other: torch.cuda.Stream, mine: torch.cuda.Stream) -> None:
    """Skip unless work on `mine` can finish while `other` is busy: two streams may share one of the driver's hardware
    work queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default), and then `mine` waits behind `other` whatever the host
    does. The control is an event waited on, the way `download` waits."""
    with torch.cuda.stream(mine):
        t = torch.ones(1, device="cuda")  # made first: an allocation may synchronise the device
    _busy(other)
    with torch.cuda.stream(mine):
        done = torch.cuda.Event()
        t.add_(1)
        done.record()
    done.synchronize()
    overlapped = not other.query()
    other.synchronize()
    if not overlapped:
        pytest.skip("these two streams share a hardware work queue here")


def _warm_pinned(*shapes_and_dtypes) -> None:
    """A block of each size in torch's caching pinned allocator: its first allocation of a size synchronises the
    device, as a server's warm start pays before serving."""
    held = [torch.empty(shape, dtype=dtype, pin_memory=True) for shape, dtype in shapes_and_dtypes for _ in range(2)]
    del held


def test_uploads_take_the_host_values_of_the_call_and_leave_the_queued_work_running():
    from aura_omni.layers.device import upload_async, upload_into

    stream = torch.cuda.Stream()
    _warm_pinned(((1024,), torch.long))
    _busy(stream)
    host = torch.arange(1024, dtype=torch.long)
    dst = torch.zeros(1024, dtype=torch.long, device="cuda")
    with torch.cuda.stream(stream):
        got = upload_async(host, torch.device("cuda"))
        upload_into(dst, host)
        queued = not stream.query()  # the host did not wait for the matmuls
        host.fill_(-1)  # the caller reuses its buffer at once
    stream.synchronize()
    assert queued
    assert torch.equal(got.cpu(), torch.arange(1024)) and torch.equal(dst.cpu(), torch.arange(1024))
    on_device = torch.ones(4, device="cuda")  # a device tensor is copied as it is
    assert torch.equal(upload_async(on_device, torch.device("cuda")), on_device)


def test_download_waits_for_its_own_stream_only_and_keeps_its_values():
    from aura_omni.layers.device import download

    other, mine = torch.cuda.Stream(), torch.cuda.Stream()
    _overlap_or_skip(other, mine)
    with torch.cuda.stream(mine):  # allocations sync the device: every block is made before the other stream is busy
        x = torch.randn(3, 48000, device="cuda")
        y, z = torch.empty_like(x), torch.empty_like(x)
        held = [download(x), download(x)]  # two pinned blocks, as a server's first steps make them
    del held
    _busy(other)  # another stage's step
    with torch.cuda.stream(mine):
        torch.mul(x, 2, out=y)  # queued work that the download must wait for
        torch.add(y, 1, out=z)
        got, again = download(y), download(z)  # the second does not reuse the first's block, which is held
    assert not other.query()  # the other stream's matmuls were not waited for
    assert (got == (x * 2).cpu().numpy()).all() and (again == got + 1).all()
    other.synchronize()
