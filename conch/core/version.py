"""conch's version, in one place: the package's ``__version__``, the server metadata, the trace
resource, the image tag and the headers of the files ``conch deploy`` writes all read it here."""

VERSION = "0.1.0"
