"""kafkalite/client/buffer_pool.py: a kept buffer is handed out again only
when nothing refers to it; the pool keeps at most its count, none over its
size cap. (The producer's and the TCP link's use of it are tested end to
end in test_per_message_paths.py and test_tcp_link.py.)"""
from kafkalite.client.buffer_pool import BufferPool


def test_a_buffer_is_reused_only_once_nothing_refers_to_it():
    pool = BufferPool(2, 1 << 20)
    a = pool.take(1000)
    assert len(a) == 1024                       # a power of two
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
    assert len(pool.take(50)) == 128
    assert len(pool.take(2000)) == 4096
    huge = pool.take(10_000)                    # over the cap: exact size, not kept
    assert len(huge) == 10_000 and all(huge is not k for k in pool.kept)


def test_a_full_pool_replaces_a_free_buffer():
    pool = BufferPool(1, 1 << 20)
    first = pool.take(100)
    del first
    second = pool.take(5000)                    # the free 128-byte one makes room
    assert pool.kept == [second] and len(second) == 8192
