"""Small inputs for the simulator tests (no database, no Django)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture
def budgets_file(tmp_path: Path) -> Path:
    return write(
        tmp_path / "budgets.csv",
        """
        team,gpu_hours
        lab,1000
        lab/a,600
        lab/b,400
        """,
    )


@pytest.fixture
def tiny_trace(tmp_path: Path) -> Path:
    """Eight jobs of 1-4 GPUs over two teams; 16 GPUs run them all at once."""
    return write(
        tmp_path / "trace.csv",
        """
        job_id,submit_s,team,user,gpus,duration_s,gpu_type,kind,utilization
        j1,0,lab/a,ann,2,3600,,train,0.9
        j2,10,lab/b,bob,1,1800,,train,
        j3,20,lab/a,ann,4,7200,,train,0.5
        j4,30,lab/b,bob,1,600,,eval,
        j5,40,lab/a,cat,2,3600,H100,train,
        j6,50,lab/b,bob,2,5400,,train,
        j7,60,lab/a,ann,1,900,,train,
        j8,70,lab/b,dan,2,1200,,train,
        """,
    )


@pytest.fixture
def write_file():
    return write
