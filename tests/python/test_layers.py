"""No import cycle between the modules of proxy/src or shared/src (scripts/module_cycles.py)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*crates):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "module_cycles.py"), *crates],
                          capture_output=True, text=True, cwd=ROOT)


def test_proxy_and_shared_have_no_import_cycles():
    out = run("proxy/src", "shared/src")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_checker_finds_a_cycle(tmp_path):
    src = tmp_path / "src"
    (src / "steps").mkdir(parents=True)
    (src / "lib.rs").write_text("mod state;\nmod steps;\n")
    (src / "state.rs").write_text("use crate::steps::auth::Source;\n")
    (src / "steps" / "mod.rs").write_text("pub mod auth;\n")
    (src / "steps" / "auth.rs").write_text("use crate::state::Gateway;\npub struct Source;\n")
    out = run(str(src))
    assert out.returncode == 1
    assert "state, steps::auth" in out.stdout
