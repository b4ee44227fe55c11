"""The agent: its loop, its tools (:mod:`.tools`), workspace confinement (:mod:`.workspace`) and
markdown skills (:mod:`.skills`). Headless: nothing here imports IPython or widgets."""
