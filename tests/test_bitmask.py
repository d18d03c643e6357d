"""The packed bitmask contract (structgate.bitmask): layout checked bit by bit against numpy."""
import numpy as np
import pytest

from structgate.bitmask import (allocate_bitmask, allowed_ids, as_numpy_row, bitmask_shape, bitmask_to_bool,
                                bool_to_bitmask, reset_bitmask)
from structgate.errors import BitmaskError


@pytest.mark.parametrize("v", [1, 31, 32, 33, 128_001, 151_936])
def test_shape_is_ceil_div_32(v):
    assert bitmask_shape(3, v) == (3, -(-v // 32))
    assert allocate_bitmask(3, v).shape == (3, -(-v // 32))
    assert (allocate_bitmask(3, v) == -1).all()


@pytest.mark.parametrize("v", [1, 5, 32, 63, 1000])
def test_pack_unpack_roundtrip_and_bit_order(v):
    rng = np.random.default_rng(v)
    allowed = rng.random(v) < 0.3
    words = bool_to_bitmask(allowed)
    assert words.dtype == np.int32 and words.shape == (-(-v // 32),)
    # bit t%32 of word t//32, least significant bit first
    for t in range(v):
        assert bool((int(words[t // 32]) >> (t % 32)) & 1) == allowed[t]
    assert (bitmask_to_bool(words, v) == allowed).all()
    assert list(allowed_ids(words, v)) == list(np.flatnonzero(allowed))


def test_bit_31_is_sign_bit():
    allowed = np.zeros(32, dtype=bool)
    allowed[31] = True
    assert bool_to_bitmask(allowed)[0] == np.int32(-2**31)


def test_as_numpy_row_validates():
    bm = allocate_bitmask(2, 100)
    row = as_numpy_row(bm, 1, 100)
    row[:] = 0
    assert (bm[1] == 0).all() and (bm[0] == -1).all()
    with pytest.raises(BitmaskError, match="dtype"):
        as_numpy_row(bm.astype(np.int64), 0, 100)
    with pytest.raises(BitmaskError, match="width"):
        as_numpy_row(bm, 0, 1000)
    with pytest.raises(BitmaskError, match="row 2 out of range"):
        as_numpy_row(bm, 2, 100)
    with pytest.raises(BitmaskError, match="2-D"):
        as_numpy_row(np.zeros((1, 1, 4), np.int32), 0, 100)


def test_torch_tensor_buffer_is_shared():
    torch = pytest.importorskip("torch")
    bm = allocate_bitmask(2, 64, torch_tensor=True)
    as_numpy_row(bm, 0, 64)[:] = 7
    assert bm[0].tolist() == [7, 7]
    reset_bitmask(bm)
    assert (bm == -1).all()
    with pytest.raises(BitmaskError, match="torch.int32"):
        as_numpy_row(bm.to(torch.int64), 0, 64)
