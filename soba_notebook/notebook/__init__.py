"""The notebook layer: IPython magics, the budget widget, the terminal fallback.

This package is the only place that may import IPython, ipywidgets or anywidget (DESIGN.md,
"Layers"). Keep this ``__init__`` light: importing ``soba_notebook.notebook`` must not pull in a
widget framework, so the UI-free pieces (``display``, ``throttle``) stay usable headless.
"""
