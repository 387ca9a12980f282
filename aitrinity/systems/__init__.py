"""Real mechanisms and measurements (torch, sockets, files); optional dependencies are imported lazily."""
