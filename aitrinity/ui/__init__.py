"""The local what-if page (``trinity ui``): :mod:`.whatif` answers, :mod:`.server` serves ``page.html``."""
