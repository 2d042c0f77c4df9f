from nbmemory.cli.main import main

raise SystemExit(main())
