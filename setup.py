"""Packaging beyond what pyproject.toml can say: the top-level ``native/`` folder (the one copy of
the C sources of the record writer and the hooks) ships inside the package as ``rankmap/native``,
so a wheel can build the MPI shim and the NCCL plugin on first use wherever it is installed."""

from pathlib import Path

from setuptools import find_namespace_packages, setup

NATIVE = [d.name for d in sorted(Path(__file__).resolve().parent.joinpath("native").iterdir()) if d.is_dir()]

setup(
    packages=find_namespace_packages("src", include=["rankmap*"]) + ["rankmap.native"]
    + [f"rankmap.native.{d}" for d in NATIVE],
    package_dir={"": "src", "rankmap.native": "native"},
    package_data={
        "rankmap.topology.fixtures": ["*.json"],
        # MPICH's own collective tuning files, as MPICH ships them (their README: source, licence)
        "rankmap.pairs": ["mpich_tuning/README.md", "mpich_tuning/*/*/*.json"],
        "rankmap.web.static": ["*"],
        **{f"rankmap.native.{d}": ["*.c", "*.cu", "*.h", "*.spec"] for d in NATIVE},
    },
)
