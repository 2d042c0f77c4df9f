"""The notebook front end: the ``%mem*`` magics, the ipywidgets explorer, the HTML views of hits
and items, the Altair charts, and what the kernel knows of the notebook it runs in.

Every part goes through the memory facade (:class:`nbmemory.Memory`, or its shared form from
:func:`nbmemory.remote.connect`) and the option specs of :mod:`nbmemory.options`.
"""
