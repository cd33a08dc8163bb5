"""Preprocessors on real files written with Pillow / numpy / csv / pyarrow."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

from pipeline.datasets.preprocess import InvalidInput, preprocessor_for, sample_dtype, sample_shape
from pipeline.datasets.preprocess.augment import augment
from pipeline.datasets.preprocess.image import decode_image
from pipeline.datasets.recipes import ImageShape, parse_recipe
from tests.datasets import corpus


def img_recipe(size: int = 16, channels: int = 3, resize: str = "squash", **extra: object):
    return parse_recipe(
        {
            "modality": "image",
            "image": {"size": size, "channels": channels, "resize": resize, **extra},
        }
    )


def decode(path: Path, recipe) -> np.ndarray:
    result = preprocessor_for(recipe).decode(str(path), recipe)
    assert len(result.samples) == 1 and result.invalid_rows == []
    x = result.samples[0].x
    assert x.shape == sample_shape(recipe) and x.dtype == sample_dtype(recipe)
    assert x.flags.c_contiguous
    return x


def spec(size: int = 16, channels: int = 3, resize: str = "squash") -> ImageShape:
    return ImageShape(size=size, channels=channels, resize=resize)


# ---- modes -----------------------------------------------------------------------------------


def test_grayscale_to_one_and_three_channels_keeps_values(tmp_path: Path) -> None:
    a = np.arange(64, dtype=np.uint8).reshape(8, 8) * 3
    Image.fromarray(a, mode="L").save(tmp_path / "g.png")
    one = decode(tmp_path / "g.png", img_recipe(8, 1))
    assert np.array_equal(one[0], a)  # 8x8 → 8x8 squash is the identity (the digits recipe)
    three = decode(tmp_path / "g.png", img_recipe(8, 3))
    assert all(np.array_equal(three[c], a) for c in range(3))


def test_rgb_to_one_channel_uses_luma(tmp_path: Path) -> None:
    Image.new("RGB", (4, 4), (255, 0, 0)).save(tmp_path / "r.png")
    x = decode(tmp_path / "r.png", img_recipe(4, 1))
    assert x.shape == (1, 4, 4) and abs(int(x[0, 0, 0]) - 76) <= 1  # 0.299 * 255


def test_16bit_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    corpus.write_gray16_png(tmp_path / "g16.png", w=32, h=8)
    with Image.open(tmp_path / "g16.png") as im:
        assert im.mode.startswith("I")
    x = decode(tmp_path / "g16.png", img_recipe(32, 1, "pad"))[0]
    row = x[16].astype(int)  # pad centres the 32x8 strip vertically
    assert row[0] == 0 and row[-1] == 255
    assert np.all(np.diff(row) >= 0) and len(set(row.tolist())) > 20  # ordering kept, no clipping
    assert 120 <= row[16] <= 136


def test_rgba_is_composited_on_white(tmp_path: Path) -> None:
    a = np.zeros((4, 4, 4), dtype=np.uint8)
    a[:, :2] = (0, 0, 0, 0)  # fully transparent black
    a[:, 2:] = (0, 0, 255, 255)  # opaque blue
    Image.fromarray(a, mode="RGBA").save(tmp_path / "a.png")
    x = decode(tmp_path / "a.png", img_recipe(4, 3))
    assert x[:, 0, 0].tolist() == [255, 255, 255]
    assert x[:, 0, 3].tolist() == [0, 0, 255]


def test_la_and_half_transparent(tmp_path: Path) -> None:
    la = Image.new("LA", (4, 4), (0, 128))
    la.save(tmp_path / "la.png")
    x = decode(tmp_path / "la.png", img_recipe(4, 1))
    assert abs(int(x[0, 0, 0]) - 127) <= 2  # black at half alpha over white


def test_palette_with_and_without_transparency(tmp_path: Path) -> None:
    p = Image.new("P", (4, 4), 1)
    p.putpalette([0, 0, 0, 0, 255, 0] + [0] * 762)
    p.save(tmp_path / "p.png")
    assert decode(tmp_path / "p.png", img_recipe(4, 3))[:, 0, 0].tolist() == [0, 255, 0]
    p.save(tmp_path / "pt.png", transparency=1)
    assert decode(tmp_path / "pt.png", img_recipe(4, 3))[:, 0, 0].tolist() == [255, 255, 255]


def test_cmyk_jpeg_becomes_rgb(tmp_path: Path) -> None:
    corpus.write_cmyk_jpeg(tmp_path / "c.jpg", (0, 255, 255, 0))
    with Image.open(tmp_path / "c.jpg") as im:
        assert im.mode == "CMYK"
    x = decode(tmp_path / "c.jpg", img_recipe(8, 3)).astype(int)
    r, g, b = x[:, 4, 4]
    assert r > 200 and g < 60 and b < 60


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    corpus.write_exif_rotated_jpeg(tmp_path / "rot.jpg")
    # pad keeps the geometry visible: shown 20 wide x 40 high → padded left and right.
    x = decode(tmp_path / "rot.jpg", img_recipe(40, 3, "pad")).astype(int)
    top, bottom, side = x[:, 5, 20], x[:, 35, 20], x[:, 20, 3]
    assert top[0] > 200 and top[2] < 60, top  # red on top
    assert bottom[2] > 200 and bottom[0] < 60, bottom  # blue below
    assert side.max() < 10, side  # black padding at the sides, not above and below
    # Without the EXIF tag the same pixels stay landscape: padding above and below.
    a = np.zeros((20, 40, 3), dtype=np.uint8)
    a[:, :20] = (255, 0, 0)
    Image.fromarray(a).save(tmp_path / "plain.jpg", quality=95)
    y = decode(tmp_path / "plain.jpg", img_recipe(40, 3, "pad")).astype(int)
    assert y[:, 3, 20].max() < 10 and y[0, 20, 5] > 200


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "BMP", "WEBP", "TIFF"])
def test_every_supported_format_decodes(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"img.{fmt.lower()}"
    Image.new("RGB", (12, 10), (10, 200, 30)).save(path, format=fmt)
    x = decode(path, img_recipe(6, 3, "squash")).astype(int)
    assert np.abs(x[:, 3, 3] - np.array([10, 200, 30])).max() <= 8


# ---- resize geometry -------------------------------------------------------------------------


@pytest.fixture
def thirds(tmp_path: Path) -> Path:
    """60 wide x 30 high: 15 green columns, 30 red, 15 blue (lossless)."""
    a = np.zeros((30, 60, 3), dtype=np.uint8)
    a[:, :15] = (0, 255, 0)
    a[:, 15:45] = (255, 0, 0)
    a[:, 45:] = (0, 0, 255)
    path = tmp_path / "thirds.png"
    Image.fromarray(a).save(path)
    return path


def test_center_crop_keeps_the_middle_square(thirds: Path) -> None:
    x = decode(thirds, img_recipe(30, 3, "center_crop"))
    assert np.array_equal(x[0], np.full((30, 30), 255)) and x[1:].max() == 0


def test_squash_keeps_everything_stretched(thirds: Path) -> None:
    x = decode(thirds, img_recipe(30, 3, "squash")).astype(int)
    assert x[1, 15, 2] > 240 and x[0, 15, 15] > 240 and x[2, 15, 28] > 240


def test_pad_fits_the_long_side_and_pads_black(thirds: Path) -> None:
    x = decode(thirds, img_recipe(30, 3, "pad")).astype(int)
    assert x[:, :6, :].max() == 0 and x[:, -6:, :].max() == 0  # 15 content rows, centred
    assert x[1, 15, 2] > 240 and x[0, 15, 15] > 240 and x[2, 15, 28] > 240


def test_upscaling_small_images(tmp_path: Path) -> None:
    Image.new("L", (3, 5), 77).save(tmp_path / "s.png")
    for mode in ("squash", "center_crop", "pad"):
        x = decode(tmp_path / "s.png", img_recipe(20, 1, mode))
        assert x[0, 10, 10] == 77


# ---- JPEG draft mode -------------------------------------------------------------------------


def test_large_jpeg_is_decoded_at_reduced_scale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A smooth 4000x3000 gradient: the draft-decoded result must match a full decode.
    yy, xx = np.mgrid[0:3000, 0:4000]
    a = np.stack([xx * 255 // 3999, yy * 255 // 2999, np.full_like(xx, 128)], axis=-1).astype(
        np.uint8
    )
    path = tmp_path / "big.jpg"
    Image.fromarray(a).save(path, quality=90)
    del a, xx, yy

    loaded_sizes: list[tuple[int, int]] = []
    real_load = JpegImagePlugin.JpegImageFile.load

    def spy_load(self):  # records how many pixels libjpeg was asked to produce
        loaded_sizes.append(self.size)
        return real_load(self)

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "load", spy_load)
    x = decode_image(str(path), spec(64, 3, "center_crop"))
    assert loaded_sizes and loaded_sizes[0] == (500, 375)  # 1/8 scale, still >= 64 on both sides
    monkeypatch.undo()

    with Image.open(path) as im:  # reference: full-size decode, then the same crop + resize
        ref = im.convert("RGB").resize((64, 64), Image.Resampling.BICUBIC, box=(500, 0, 3500, 3000))
    ref_a = np.asarray(ref).transpose(2, 0, 1).astype(int)
    assert np.abs(x.astype(int) - ref_a).mean() < 3


def test_draft_never_goes_below_the_output_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Image.new("RGB", (300, 100), (9, 9, 9)).save(tmp_path / "w.jpg")
    sizes: list[tuple[int, int]] = []
    real_load = JpegImagePlugin.JpegImageFile.load
    monkeypatch.setattr(
        JpegImagePlugin.JpegImageFile,
        "load",
        lambda self: (sizes.append(self.size), real_load(self))[1],
    )
    decode_image(str(tmp_path / "w.jpg"), spec(40, 3, "center_crop"))
    assert set(sizes) == {
        (150, 50)
    }  # scale 2: the short side (50) stays >= 40; scale 4 would give 25


# ---- bad input -------------------------------------------------------------------------------


def _reason(path: Path, recipe) -> str:
    with pytest.raises(InvalidInput) as info:
        preprocessor_for(recipe).decode(str(path), recipe)
    assert info.value.reason == str(info.value)
    return info.value.reason


def test_truncated_jpeg(tmp_path: Path) -> None:
    assert _reason(corpus.write_truncated_jpeg(tmp_path / "t.jpg"), img_recipe()).startswith(
        "truncated image"
    )


def test_truncated_png(tmp_path: Path) -> None:
    corpus.noise_rgb(64, 64).save(tmp_path / "full.png")
    data = (tmp_path / "full.png").read_bytes()
    (tmp_path / "t.png").write_bytes(data[: len(data) // 2])
    assert "truncated" in _reason(tmp_path / "t.png", img_recipe())


def test_zero_byte_png_and_text_named_jpg(tmp_path: Path) -> None:
    assert _reason(corpus.write_empty(tmp_path / "z.png"), img_recipe()) == "empty file (0 bytes)"
    assert _reason(corpus.write_text_as_jpg(tmp_path / "t.jpg"), img_recipe()).startswith(
        "not an image file"
    )


def test_unsupported_format_is_not_decoded(tmp_path: Path) -> None:
    Image.new("RGB", (4, 4)).save(tmp_path / "a.gif", format="GIF")
    assert _reason(tmp_path / "a.gif", img_recipe()).startswith("not an image file")


def test_decompression_bomb_from_header(tmp_path: Path) -> None:
    reason = _reason(corpus.write_bomb_png(tmp_path / "b.png"), img_recipe())
    assert reason.startswith("decompression bomb: 400000000 pixels > limit")


def test_decompression_bomb_past_the_recipe_limit(tmp_path: Path) -> None:
    Image.new("L", (100, 100)).save(tmp_path / "big.png")
    assert (
        _reason(tmp_path / "big.png", img_recipe(max_pixels=9999))
        == "decompression bomb: 10000 pixels > limit 9999"
    )
    assert decode(tmp_path / "big.png", img_recipe(max_pixels=10000)).shape == (3, 16, 16)


def test_decompression_bomb_between_pillow_warning_and_error(tmp_path: Path) -> None:
    # 100 M pixels: above Pillow's warning threshold, below its hard error; our limit refuses it.
    corpus.write_bomb_png(tmp_path / "b.png", 10_000, 10_000)
    assert (
        _reason(tmp_path / "b.png", img_recipe())
        == "decompression bomb: 100000000 pixels > limit 89478485"
    )


# ---- arrays ----------------------------------------------------------------------------------

ARRAY = parse_recipe({"modality": "array", "array": {"shape": [4, 4], "dtype": "float32"}})


def test_array_good_and_big_endian(tmp_path: Path) -> None:
    v = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.save(tmp_path / "a.npy", v)
    np.save(tmp_path / "b.npy", v.astype(">f4"))
    assert np.array_equal(decode(tmp_path / "a.npy", ARRAY), v)
    out = decode(tmp_path / "b.npy", ARRAY)
    assert np.array_equal(out, v) and out.dtype == np.dtype("float32")


def test_array_mismatches_and_pickles(tmp_path: Path) -> None:
    np.save(tmp_path / "s.npy", np.zeros((3, 4), dtype=np.float32))
    np.save(tmp_path / "d.npy", np.zeros((4, 4), dtype=np.float64))
    np.savez(tmp_path / "z.npy", a=np.zeros(2))
    (tmp_path / "z.npy.npz").rename(tmp_path / "z.npy")
    assert _reason(tmp_path / "s.npy", ARRAY) == "shape (3, 4) != recipe shape (4, 4)"
    assert _reason(tmp_path / "d.npy", ARRAY) == "dtype float64 != recipe dtype float32"
    assert (
        _reason(corpus.write_pickled_npy(tmp_path / "p.npy"), ARRAY)
        == "pickled .npy refused (allow_pickle=False)"
    )
    assert (
        _reason(corpus.write_raw_pickle_as_npy(tmp_path / "r.npy"), ARRAY)
        == "pickled .npy refused (allow_pickle=False)"
    )
    assert "npz" in _reason(tmp_path / "z.npy", ARRAY)
    (tmp_path / "junk.npy").write_bytes(b"hello world, no magic here")
    assert "not a readable .npy" in _reason(tmp_path / "junk.npy", ARRAY)


# ---- tables ----------------------------------------------------------------------------------


def test_csv_rows_with_line_numbers(tmp_path: Path) -> None:
    expected = corpus.write_bad_corpus(tmp_path / "t", modality="table")
    recipe = parse_recipe(tomllib.loads(corpus.corpus_recipe_toml("table")))
    result = preprocessor_for(recipe).decode(str(tmp_path / "t" / "rows.csv"), recipe)
    assert [s.row for s in result.samples] == [2, 3, 7]
    assert [s.label for s in result.samples] == ["a", "b", "b"]
    assert np.array_equal(
        np.stack([s.x for s in result.samples]), np.array([[1, 2], [3.5, -1], [7, 8]], np.float32)
    )
    assert all(
        s.x.dtype == np.float32 and s.x.shape == sample_shape(recipe) for s in result.samples
    )
    bad = dict(result.invalid_rows)
    assert bad[5] == "line 5: column 'x2' is not a number: 'abc'"
    for key, reason in expected.items():
        if key.startswith("rows.csv#"):
            line = int(key.split("#")[1])
            assert (reason is None) == (line not in bad)
            if reason:
                assert reason in bad[line] and bad[line].startswith(f"line {line}: ")


def test_csv_default_features_bom_quotes_and_field_counts(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(
        '\ufeffy,a,b\n"x","1","2e3"\nx,1\nz,nan,1\n"multi\nline",4,5\n', encoding="utf-8"
    )
    recipe = parse_recipe({"modality": "table", "table": {"label_column": "y"}})
    assert sample_shape(recipe) == (-1,)
    result = preprocessor_for(recipe).decode(str(path), recipe)
    assert [(s.label, s.x.tolist(), s.row) for s in result.samples] == [
        ("x", [1.0, 2000.0], 2),
        ("multi\nline", [4.0, 5.0], 6),
    ]
    assert result.invalid_rows == [
        (3, "line 3: 2 fields, header has 3"),
        (4, "line 4: column 'a' is not a finite number: 'nan'"),
    ]


def test_table_file_level_problems(tmp_path: Path) -> None:
    recipe = parse_recipe(tomllib.loads(corpus.corpus_recipe_toml("table")))
    (tmp_path / "e.csv").write_text("")
    assert _reason(tmp_path / "e.csv", recipe) == "empty CSV file (no header row)"
    (tmp_path / "m.csv").write_text("x1,label\n1,a\n")
    assert _reason(tmp_path / "m.csv", recipe).startswith("missing column(s) 'x2'")
    (tmp_path / "u.csv").write_bytes(b"x1,x2,label\n1,2,\xff\n")
    assert _reason(tmp_path / "u.csv", recipe).startswith("not UTF-8 text")


def test_parquet_rows(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"x1": [1.0, 2.0, None, 4.0], "x2": [1, 2, 3, 4], "label": ["a", None, "c", "7"]}),
        tmp_path / "t.parquet",
    )
    recipe = parse_recipe(tomllib.loads(corpus.corpus_recipe_toml("table")))
    result = preprocessor_for(recipe).decode(str(tmp_path / "t.parquet"), recipe)
    assert [(s.row, s.label, s.x.tolist()) for s in result.samples] == [
        (1, "a", [1.0, 1.0]),
        (4, "7", [4.0, 4.0]),
    ]
    assert result.invalid_rows == [
        (2, "line 2: missing label in column 'label'"),
        (3, "line 3: column 'x1' is empty"),
    ]
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 nope")
    assert _reason(tmp_path / "bad.parquet", recipe).startswith("not a readable Parquet file")


# ---- the corpus ------------------------------------------------------------------------------


def _digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("modality", ["image", "array", "table"])
def test_corpus_verdicts_and_lake_untouched(tmp_path: Path, modality: str) -> None:
    root = tmp_path / "lake" / "corpus"
    expected = corpus.write_bad_corpus(root, modality=modality)
    before = _digest(root)
    recipe = parse_recipe(tomllib.loads(corpus.corpus_recipe_toml(modality)))
    pre = preprocessor_for(recipe)
    for rel in sorted({k.split("#")[0] for k in expected}):
        want = expected.get(rel, None)
        if want is None and rel not in expected:
            continue  # a table file checked row by row
        if want is None:
            result = pre.decode(str(root / rel), recipe)
            assert result.samples, rel
            assert all(s.x.shape == sample_shape(recipe) for s in result.samples) or sample_shape(
                recipe
            ) == (-1,)
        else:
            with pytest.raises(InvalidInput) as info:
                pre.decode(str(root / rel), recipe)
            assert want in info.value.reason, (rel, info.value.reason)
    assert _digest(root) == before


# ---- augmentation ----------------------------------------------------------------------------

OPS = ["hflip", "random_resized_crop", "color_jitter"]


@pytest.mark.parametrize("channels", [1, 3])
def test_augment_is_deterministic_per_md5_and_copy(channels: int) -> None:
    x = np.random.default_rng(0).integers(0, 256, (channels, 24, 20), dtype=np.uint8)
    a = augment(x, md5="abc", copy_index=0, ops=OPS)
    assert a.shape == x.shape and a.dtype == np.uint8
    assert np.array_equal(a, augment(x.copy(), md5="abc", copy_index=0, ops=OPS))
    assert not np.array_equal(a, augment(x, md5="abc", copy_index=1, ops=OPS))
    assert not np.array_equal(a, augment(x, md5="abd", copy_index=0, ops=OPS))
    assert not np.array_equal(a, x)
    assert np.array_equal(
        x, np.random.default_rng(0).integers(0, 256, (channels, 24, 20), dtype=np.uint8)
    )


def test_augment_hflip_only_flips_or_keeps() -> None:
    x = np.random.default_rng(1).integers(0, 256, (3, 8, 8), dtype=np.uint8)
    outcomes = set()
    for i in range(16):
        y = augment(x, md5="m", copy_index=i, ops=["hflip"])
        if np.array_equal(y, x):
            outcomes.add("same")
        else:
            assert np.array_equal(y, x[:, :, ::-1])
            outcomes.add("flipped")
    assert outcomes == {"same", "flipped"}


def test_augment_refuses_non_images() -> None:
    with pytest.raises(ValueError, match="uint8"):
        augment(np.zeros((3, 4, 4), np.float32), md5="m", copy_index=0, ops=OPS)
    with pytest.raises(ValueError, match="unknown augmentation op"):
        augment(np.zeros((1, 4, 4), np.uint8), md5="m", copy_index=0, ops=["rotate"])
