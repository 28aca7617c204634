from edged.cli.main import main

raise SystemExit(main())
