from rlplug.cli import main

raise SystemExit(main())
