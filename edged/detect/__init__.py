"""Detection post-processing: model outputs -> boxes in the pixels of the client's frame.

Pure numpy + OpenCV, no sockets and no server code, so it runs the same in the
daemon, in ``edged compile`` (mAP validation) and in benchmarks. Entry point:
:class:`edged.detect.postprocess.Postprocessor`.
"""
