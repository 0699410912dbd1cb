"""kafkalite/client/buffer_pool.py: a kept buffer is handed out again only
when nothing refers to it; the pool keeps at most its count, none over its
size cap; a shelf carries a done pool's buffers to the next pool. (The
producer's and the TCP link's use of it are tested end to end in
test_per_message_paths.py and test_tcp_link.py.)"""
from kafkalite.client.buffer_pool import BufferPool, SpareShelf, rounded


def test_a_buffer_is_reused_only_once_nothing_refers_to_it():
    pool = BufferPool(2, 1 << 20)
    a = pool.take(1000)
    assert len(a) == 1024                       # rounded up to an eighth of 1024
    view = memoryview(a)[:10]                   # e.g. a batch being sent zero-copy
    del a
    b = pool.take(1000)                         # the first is still referred to
    assert b is not view.obj and len(pool.kept) == 2
    first = view.obj
    view.release()
    del view, b
    assert pool.take(1000) is not first         # ``first`` (this test's name) refers to it
    del first
    c = pool.take(900)
    held = [c, pool.take(500)]                  # both kept ones, now free, handed out
    assert held[0] is not held[1] and {id(x) for x in held} == {id(k) for k in pool.kept}
    d = pool.take(100)                          # both in use, count reached: not kept
    assert all(d is not k for k in pool.kept)


def test_the_smallest_free_buffer_that_fits_and_the_size_cap():
    pool = BufferPool(3, 4096)
    small, big = pool.take(100), pool.take(3000)
    del small, big
    assert len(pool.take(50)) == 112            # 100 rounded to a sixteen
    assert len(pool.take(2000)) == 3072
    huge = pool.take(10_000)                    # over the cap: exact size, not kept
    assert len(huge) == 10_000 and all(huge is not k for k in pool.kept)


def test_a_full_pool_replaces_a_free_buffer():
    pool = BufferPool(1, 1 << 20)
    first = pool.take(100)
    del first
    second = pool.take(5000)                    # the free 128-byte one makes room
    assert pool.kept == [second] and len(second) == 5120


def test_sizes_round_up_to_an_eighth_of_the_next_power_of_two():
    assert [rounded(n) for n in (1, 7, 8, 9, 100, 1000, 1024, 1025, 5000)] == [
        1, 7, 8, 10, 112, 1024, 1024, 1280, 5120]
    # a fetch answer a little over a consumer's 16 MiB (a batch overshoots)
    assert rounded(16_900_000) == 20 << 20      # not 32 MiB, every byte of which is zeroed
    for n in range(1, 5000):
        assert n <= rounded(n) <= n * 1.25 + 1


def test_a_shelf_carries_a_done_pools_buffers_to_the_next_pool():
    shelf = SpareShelf(2)
    first = BufferPool(2, 1 << 20)
    a, b = first.take(1000), first.take(5000)
    ids = {id(a), id(b)}
    held = memoryview(b)[:4]                    # something still refers to b
    del a, b
    shelf.put(first)
    assert first.kept == []                     # the done pool gives them up
    second = shelf.stock(BufferPool(2, 1 << 20))
    assert {id(k) for k in second.kept} == ids
    got = second.take(900)                      # the free one, not the one still held
    assert id(got) in ids and got is not held.obj and len(got) == 1024
    again = second.take(900)
    assert again is not held.obj and again is not got   # b is still referred to
    assert shelf.stock(BufferPool(2, 1 << 20)).kept == []   # the shelf is empty now


def test_a_shelf_keeps_its_count_and_a_pool_its_size_cap():
    shelf = SpareShelf(2)
    for size in (100, 200, 300):
        pool = BufferPool(1, 1 << 20)
        pool.take(size)
        shelf.put(pool)
    small = shelf.stock(BufferPool(4, 150))     # only what fits under its cap, once
    assert [len(k) for k in small.kept] == [112]
    big = shelf.stock(BufferPool(4, 1 << 20))
    assert [len(k) for k in big.kept] == [224]  # the third never got onto the full shelf
    assert shelf.stock(BufferPool(4, 1 << 20)).kept == []

