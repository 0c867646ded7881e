from rankmap.cli import main

raise SystemExit(main())
