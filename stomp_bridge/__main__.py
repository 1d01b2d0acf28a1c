import sys

from stomp_bridge.cli import main

sys.exit(main())
