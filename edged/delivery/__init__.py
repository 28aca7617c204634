"""Model versions as they arrive on a device: one bounded, content-addressed store.

Why a layer of its own, between the protocols and the compiler: a version of a model
arrives by more than one road (a file Frigate sends over its socket; a signed bundle from a
source), and every road must end in the same place, with the same bounds: at most a few
versions per model, a total quota for the state directory, what serves and its fallback
never evicted, a restart that finds a consistent index. The protocols use it (Frigate's
room stores what it is sent here); it uses only the layers below it.
"""
