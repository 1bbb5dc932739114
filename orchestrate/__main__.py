from __future__ import annotations

from .cli.early import main

main()
