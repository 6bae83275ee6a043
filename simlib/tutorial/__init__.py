"""The tutorial's side of simlib: pictures, tables, widgets and exercises for the notebooks.

Nothing below this floor imports from here. matplotlib, ipywidgets and IPython
are imported only inside what needs them, so the text helpers work without them.
"""
