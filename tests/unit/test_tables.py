"""Range writes: files range-partitioned on the reader key, bounds reused from the day before."""

from __future__ import annotations

import datetime as dt
from itertools import pairwise
from pathlib import Path

import pyarrow.parquet as pq

from support.paths import recorded, version

D1, D2, D3, D4 = (dt.date(2026, 3, d) for d in (1, 2, 3, 4))
AT = dt.datetime(2026, 3, 1, 8)


def follows(consumers: range, producers: int = 4) -> list[tuple[str, str, dt.datetime]]:
    return [(f"u{c:05d}", f"p{p}", AT) for c in consumers for p in range(producers)]


def files_of(wh: Path, ds: dt.date) -> list[list[tuple[str, str]]]:
    """Each file's (consumer_id, producer_id) rows in file order, the files by name."""
    folder = version(wh, "clean", "follows", ds)
    out = []
    for p in sorted(folder.glob("*.parquet")):
        cols = pq.read_table(p, columns=["consumer_id", "producer_id"]).to_pydict()
        out.append(list(zip(cols["consumer_id"], cols["producer_id"], strict=True)))
    return out


def file_minimums(wh: Path, ds: dt.date) -> list[str]:
    return [rows[0][0] for rows in files_of(wh, ds)]


def check_range_files(files: list[list[tuple[str, str]]], expected: list[tuple]) -> None:
    """Every file sorted, the files' consumer ranges disjoint, together the rows written."""
    for rows in files:
        assert rows == sorted(rows)
    for a, b in pairwise(files):
        assert a[-1][0] < b[0][0]
    assert sorted(r for rows in files for r in rows) == sorted((c, p) for c, p, _ in expected)


def test_range_write_reuses_the_previous_bounds_and_rebalances(spark, make_settings):
    from jobs.common.storage import Storage
    from jobs.common.tables import contract, previous_bounds, write_partition

    settings = make_settings()
    wh, root = Storage.at(settings.warehouse), Path(settings.warehouse)
    c = contract("clean", "follows")
    schema = "consumer_id string, producer_id string, followed_at timestamp"

    def write(rows: list, ds: dt.date) -> None:
        with recorded(wh.root, ds, "ingest"):
            write_partition(spark.createDataFrame(rows, schema), wh, c, ds, files=4)

    # day 1: nothing before it, so the bounds are sampled
    day1 = follows(range(1000))
    assert previous_bounds(wh, c, D1, 4) is None
    write(day1, D1)
    files1 = files_of(root, D1)
    assert len(files1) == 4
    check_range_files(files1, day1)

    # day 2: 100 consumers left, 150 joined after the last one; the bounds are day 1's
    day2 = follows(range(100, 1150))
    bounds = file_minimums(root, D1)[1:]
    assert previous_bounds(wh, c, D2, 4) == bounds
    assert previous_bounds(wh, c, D2, 8) is None  # another file count: sampled
    write(day2, D2)
    files2 = files_of(root, D2)
    check_range_files(files2, day2)
    edges = [None, *bounds, None]
    for i, rows in enumerate(files2):  # file i holds the consumers from bound i-1 to bound i
        assert all(
            (edges[i] is None or cid >= edges[i]) and (edges[i + 1] is None or cid < edges[i + 1])
            for cid, _ in rows
        )

    # day 3: 5,000 consumers join after the last bound; day 2's bounds put them all in the
    # last file, which makes day 3's files too unbalanced to reuse on day 4
    day3 = follows(range(100, 6150))
    write(day3, D3)
    files3 = files_of(root, D3)
    check_range_files(files3, day3)
    sizes3 = [len(rows) for rows in files3]
    assert max(sizes3) > 2 * sum(sizes3) / len(sizes3)
    assert previous_bounds(wh, c, D4, 4) is None

    # day 4: sampled afresh, so the files are balanced again
    write(day3, D4)
    files4 = files_of(root, D4)
    check_range_files(files4, day3)
    sizes4 = [len(rows) for rows in files4]
    assert len(sizes4) == 4 and max(sizes4) <= 2 * sum(sizes4) / len(sizes4)


def test_ids_marked_in_the_contract_are_written_without_a_dictionary(spark, make_settings):
    """``"dictionary": false`` columns of a contract (the edge plan's ids) are written plain;
    the others keep Parquet's dictionary, and the rows read back as written."""
    from jobs.common.storage import Storage
    from jobs.common.tables import contract, write_partition

    settings = make_settings()
    wh = Storage.at(settings.warehouse)
    c = contract("plan", "edge_plan")
    plain = {col.name for col in c.columns if not col.dictionary}
    assert plain == {"consumer_id", "producer_id", "source_id"}
    rows = [
        (f"u{i:04d}", f"p{i % 7}", "push" if i % 3 else "pull", f"u{i:04d}", i / 7, "ff-per-pair")
        for i in range(2000)
    ]
    df = spark.createDataFrame(rows, ", ".join(f"{col.name} {col.type}" for col in c.columns))
    with recorded(wh.root, D1, "plan"):
        write_partition(df, wh, c, D1, files=2)

    folder = version(settings.warehouse, "plan", "edge_plan", D1)
    files = sorted(folder.glob("*.parquet"))
    assert len(files) == 2
    read = []
    for path in files:
        meta = pq.ParquetFile(path).metadata
        strings = [meta.row_group(0).column(i) for i in range(meta.num_columns)]
        strings = [chunk for chunk in strings if chunk.physical_type == "BYTE_ARRAY"]
        assert len(strings) == 5
        for chunk in strings:
            dictionary = any("DICTIONARY" in e for e in chunk.encodings)
            # 1,000 ids fit one dictionary page: Parquet would use one for every string column
            assert dictionary == (chunk.path_in_schema not in plain), chunk.path_in_schema
        read += [tuple(r.values()) for r in pq.read_table(path).to_pylist()]
    assert sorted(read) == sorted(rows)


def test_a_contract_with_a_dictionary_flag_that_is_not_a_boolean_is_refused(tmp_path, monkeypatch):
    """``"dictionary": "false"`` (a string) would otherwise keep the dictionary silently."""
    import json

    import pytest

    from jobs.common.tables import ContractError, contract

    folder = tmp_path / "test_layer" / "ids"
    folder.mkdir(parents=True)
    column = {"name": "consumer_id", "type": "string", "nullable": False}
    spec = {"table": "test_layer/ids", "version": 1, "columns": [column]}
    (folder / "v1.json").write_text(json.dumps(spec))
    (folder / "v2.json").write_text(
        json.dumps({**spec, "version": 2, "columns": [{**column, "dictionary": "false"}]})
    )
    monkeypatch.setenv("FEEDPIPE_SCHEMAS", str(tmp_path))
    assert contract("test_layer", "ids").columns[0].dictionary is True
    with pytest.raises(ContractError, match='consumer_id: "dictionary" must be true or false'):
        contract("test_layer", "ids", 2)
