"""The simulator and the metric formulas import no Django (DESIGN.md §2), checked in a fresh interpreter."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_simulation_and_pyramid_import_no_django():
    code = (
        "import sys\n"
        "import scheduling.pyramid, scheduling.job_ceiling, scheduling.simulation, scheduling.simulation.cli\n"
        "import scheduling.simulation.check\n"
        "import scheduling.simulation.baselines, scheduling.simulation.engine\n"
        "bad = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "print(','.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"Django imported: {proc.stdout} {proc.stderr}"


def test_simulation_imports_only_policy_and_the_metrics_from_the_project():
    code = (
        "import sys\n"
        "import scheduling.simulation.cli, scheduling.simulation.check\n"
        "ours = sorted(m for m in sys.modules if m.split('.')[0] in ('scheduling', 'budgets', 'portal'))\n"
        "bad = [m for m in ours if not (m in ('scheduling', 'scheduling.pyramid', 'scheduling.job_ceiling') or "
        "m.startswith(('scheduling.policy', 'scheduling.simulation')))]\n"
        "print(','.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"unexpected project imports: {proc.stdout} {proc.stderr}"
