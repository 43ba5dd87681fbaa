from minitrain.cli import main

raise SystemExit(main())
