"""``parse gpu-metrics``'s strict entry: a file that is not a gpu_metrics table is refused, not decoded.

The sysfs source reads what the kernel wrote and decodes leniently (``decode``: a truncated table or an unknown
revision still gives its header and one warning, so a new kernel costs a field, not the source). Offline, a file
given to ``parse`` can be anything: ``/bin/ls`` has a header that reads as "format_revision 76.70". A capture is
taken whole (``cat`` of the sysfs file), so the header must agree with the input on two things, else
:class:`ParseError` (``parse`` exits 1 with one line):

- ``structure_size`` is the input's length: the kernel writes exactly the table it describes;
- the format revision names a known family (1, 2 or 3); a newer content revision of a known family is still
  decoded, with its warning (``decode``).
"""

from __future__ import annotations

from exporter.model import ParseError
from exporter.model.gpu_metrics import GpuMetrics
from exporter.parsers.gpu_metrics.decode import _HEADER, _newest, parse_gpu_metrics


def parse_gpu_metrics_capture(data: bytes) -> GpuMetrics:
    """Decode a captured ``gpu_metrics`` file; ParseError when it is not one (see the module docstring)."""
    data = bytes(data)
    if len(data) >= _HEADER.size:
        structure_size, frev, crev = _HEADER.unpack_from(data)
        if _newest(frev) is None:
            raise ParseError(
                f"not a capture: the header's format revision {frev}.{crev} names no gpu_metrics family "
                "(known: 1, 2, 3)"
            )
        if structure_size != len(data):
            raise ParseError(
                f"not a capture: the header says {structure_size} bytes (format revision {frev}.{crev}), "
                f"the input has {len(data)}"
            )
    return parse_gpu_metrics(data)
