"""Running the attnlab command line inside a test."""

from attnlab.cli import main


def cli(capsys, *argv):
    """``(exit status, stdout, stderr)`` of ``attnlab ARGV``, argparse's own exits included."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err
