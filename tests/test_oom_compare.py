"""Does the failing allocation depend on the batch? :func:`compare_attempts` on the corpus's
verbatim CUDA out-of-memory messages (line numbers as in oom_messages_from_issues.txt)."""

from __future__ import annotations

from costctl.lifecycle.oom_compare import POOLED_BLOCK_BYTES, REL_TOLERANCE, Attempt, compare_attempts, same_size
from costctl.replay.oom import OomEvent, match_oom

from replay_support import corpus_file

MiB, GiB = 2**20, 2**30


def _line(number: int) -> str:
    return corpus_file("oom_messages_from_issues.txt").read_text().splitlines()[number - 1]


def _event(text: str) -> OomEvent:
    event = match_oom(text)
    assert event is not None, text
    return event


def _compare(first: str, second: str, batches: tuple[int, int] = (64, 32)):
    return compare_attempts(Attempt(batches[0], _event(first)), Attempt(batches[1], _event(second)))


def test_the_same_message_at_half_the_batch_is_memory_that_does_not_depend_on_the_batch() -> None:
    for number in (3, 6, 7, 10, 14, 18, 19):  # 2.87 GiB ... 124.68 GiB, both PyTorch formats, vLLM's prefix
        c = _compare(_line(number), _line(number))
        assert c.verdict == "same", number
    c = _compare(_line(14), _line(14))
    assert c.why == "23326.72 MiB requested at batch 64 and at 32"  # 22.78 GiB
    ev = c.evidence()
    assert ev["before"]["requested_bytes"] == ev["after"]["requested_bytes"] == round(22.78 * GiB)
    assert ev["after"]["allocated_bytes"] == round(9.08 * GiB)


def test_a_fixed_allocation_beside_memory_that_shrank_with_the_batch_is_retried() -> None:
    # line 3 again, at half the batch: the same 2.87 GiB request, but less already allocated (the
    # activations halved): the next halving may leave room for the fixed buffer
    smaller = _line(3).replace("8.77 GiB already allocated", "6.10 GiB already allocated")
    c = _compare(_line(3), smaller)
    assert c.verdict == "changed"
    assert c.why.endswith("went from 8980.48 MiB to 6246.40 MiB")  # 8.77 GiB, 6.10 GiB
    # the same memory in use (within the tolerance): nothing the batch holds was freed
    same_use = _line(3).replace("8.77 GiB already allocated", "8.75 GiB already allocated")
    assert _compare(_line(3), same_use).verdict == "same"


def test_a_request_larger_than_the_card_never_fits_whatever_the_batch() -> None:
    big = _line(3).replace("Tried to allocate 2.87 GiB", "Tried to allocate 40.00 GiB")
    smaller = big.replace("8.77 GiB already allocated", "1.10 GiB already allocated")
    c = _compare(big, smaller)
    assert c.verdict == "same" and "more than the card's" in c.why


def test_an_allocation_that_changed_with_the_batch_is_retried() -> None:
    # lines 8 and 12: the same 4.00 GiB card, 32.00 MiB then 20.00 MiB requested
    c = _compare(_line(8), _line(12))
    assert c.verdict == "changed" and c.why == "the allocation went from 32.00 MiB to 20.00 MiB"
    halved = _line(14).replace("Tried to allocate 22.78 GiB", "Tried to allocate 11.39 GiB")
    assert _compare(_line(14), halved).verdict == "changed"


def test_within_the_printed_precision_is_the_same_allocation() -> None:
    # two decimals of the unit: 22.00 vs 21.90 MiB is 0.45 %, inside the 1 % tolerance; 21.70 is not
    assert REL_TOLERANCE == 0.01
    close = _line(13).replace("Tried to allocate 22.00 MiB", "Tried to allocate 21.90 MiB")
    far = _line(13).replace("Tried to allocate 22.00 MiB", "Tried to allocate 21.70 MiB")
    assert _compare(_line(13), close).verdict == "same"
    assert _compare(_line(13), far).verdict == "changed"
    assert same_size(100, 101) and not same_size(100, 102)
    # XLA states bytes exactly
    xla = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate {} bytes."
    assert _compare(xla.format(GiB), xla.format(GiB)).verdict == "same"
    assert _compare(xla.format(GiB), xla.format(GiB // 2)).verdict == "changed"


def test_the_allocator_block_size_alone_does_not_show_a_fixed_allocation() -> None:
    # lines 4, 12, 17 all ask for the 20 MiB block (any tensor of 1-10 MiB): not the same tensor
    assert 20 * MiB in POOLED_BLOCK_BYTES and _event(_line(12)).requested_bytes == 20 * MiB
    same_card = _line(12).replace("825.15 MiB is allocated", "3.10 GiB is allocated")
    c = _compare(_line(12), same_card)
    assert c.verdict == "unknown" and "caching allocator's block size" in c.why
    # ... unless the job died with exactly the same memory in use (the weights do not fit)
    c = _compare(_line(12), _line(12))
    assert c.verdict == "same" and "825.15 MiB already allocated both times" in c.why


def test_no_allocation_figure_means_no_comparison() -> None:
    for first, second in [("RuntimeError: CUDA error: out of memory", "RuntimeError: CUDA error: out of memory"),
                          (_line(14), "RuntimeError: CUDA error: out of memory"),
                          ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
                           "tensor with shape[64,3,224,224]", _line(14))]:
        c = _compare(first, second)
        assert c.verdict == "unknown" and c.why == "the OOM message gives no allocation size"


def test_different_cards_or_a_batch_that_did_not_shrink_are_not_compared() -> None:
    assert _compare(_line(2), _line(12)).why == "the two attempts report different GPUs"  # 5.80 vs 4.00 GiB
    assert _compare(_line(14), _line(14), batches=(32, 32)).why == "the batch did not shrink"
