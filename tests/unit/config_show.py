"""`stomp-bridge config show` as the configuration tests read it."""

import json

from stomp_bridge.cli import main


def show(capsys, *argv):
    assert main(["config", "show", *argv]) == 0
    return json.loads(capsys.readouterr().out)
