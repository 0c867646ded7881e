"""The link sampler against a scripted counter source (the GPU run is in docs/validation.md)."""

from rankmap.capture.sampler import PCIE_WRAP, Counters, LinkSampler


class Scripted:
    """Replays a list of readings per GPU, one per call."""

    def __init__(self, readings: dict[int, list[Counters]]):
        self.readings = readings
        self.calls = {g: 0 for g in readings}

    def gpu_count(self) -> int:
        return len(self.readings)

    def read(self, gpu: int) -> Counters:
        r = self.readings[gpu][self.calls[gpu]]
        self.calls[gpu] += 1
        return r


def test_nvlink_deltas_and_pcie_unwrap():
    near_top = PCIE_WRAP - 1000
    src = Scripted({
        0: [Counters(1024 * 10, 2048, near_top, 5),
            Counters(1024 * 110, 2048 + 4096, 500, 5 + 7),        # PCIe TX wrapped: +1500
            Counters(1024 * 1110, 2048 + 4096, 500 + 3_000_000_000, 5 + 7)],
        1: [Counters(None, None, None, None)] * 3,                  # a GPU whose counters are unknown
    })
    s = LinkSampler(src)
    s.sample_once()
    s.sample_once()
    last = s.sample_once()
    g0 = [x for x in last if x.gpu == 0][0]
    assert g0.nvlink_tx == 1024 * 1100
    assert g0.nvlink_rx == 4096
    assert g0.pcie_tx == 1500 + 3_000_000_000
    assert g0.pcie_rx == 7
    g1 = [x for x in last if x.gpu == 1][0]
    assert (g1.nvlink_tx, g1.pcie_tx) == (None, None)
    assert s.totals()[0] == g0
    assert len(s.samples) == 6


def test_thread_start_stop_collects_and_streams():
    import itertools

    class Counting:
        def __init__(self):
            self.n = itertools.count()

        def gpu_count(self):
            return 1

        def read(self, gpu):
            k = next(self.n)
            return Counters(k * 1024, 0, k, 0)

    seen = []
    s = LinkSampler(Counting(), interval_s=0.001, on_sample=seen.extend).start()
    import time
    time.sleep(0.05)
    out = s.stop()
    assert len(out) >= 3 and out == seen
    # cumulative and monotone
    assert all(b.nvlink_tx > a.nvlink_tx for a, b in zip(out, out[1:]))
    assert out[-1].pcie_tx == len(out) - 1
