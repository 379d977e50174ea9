"""`scalerl --help` lists the commands and runs without importing torch."""

import subprocess
import sys

from scalerl.cli import COMMANDS, main


def test_help_lists_every_command(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_fails(capsys):
    try:
        main(["nonsense"])
    except SystemExit as err:
        assert err.code == 2
    assert "unknown command" in capsys.readouterr().err


def test_help_is_cheap():
    code = "import sys; from scalerl.cli import main; main(['--help'] if False else []); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("False")
