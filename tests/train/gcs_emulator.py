"""A local Google Cloud Storage server for the ``gs://`` tests (``gcp-storage-emulator``).

    python -m tests.train.gcs_emulator PORT    # serves gs://bucket at http://localhost:PORT

:func:`environment` points every writer of the trainer at it through their documented
endpoint settings: TensorStore (Orbax's array writes) through ``TENSORSTORE_GCS_HTTP_URL``
with a fixed token (``GOOGLE_AUTH_TOKEN_FOR_TESTING``); ``etils.epath`` (config.json,
metrics.jsonl, TensorBoard events, Orbax's directories and metadata) through fsspec's
``gcsfs`` (``EPATH_USE_TF=false``: TensorFlow's ``tf.io.gfile`` has no endpoint setting),
which, like ``google-cloud-storage``, reads ``STORAGE_EMULATOR_HOST``; array_record's reader
(the default input path's ArrayRecord files, through google-cloud-cpp) through
``CLOUD_STORAGE_EMULATOR_ENDPOINT``, with which it sends no credentials.

The emulator (2026.7.19) leaves out the ``x-goog-generation`` header of a media download,
which TensorStore takes a read object's generation from: without it every read reports
generation 0, and the next conditional write of an OCDBT manifest fails with "Malformed
StorageGeneration". :func:`main` adds the header (and ``x-goog-metageneration``), as the
real service sends them. The emulator does not check ``ifGenerationMatch`` preconditions,
so concurrent writers to one manifest are not tested here (a single process writes its
own OCDBT database).
"""

from __future__ import annotations

import sys
from http import HTTPStatus

from gcp_storage_emulator import server
from gcp_storage_emulator.handlers import objects

#: The bucket the server creates.
BUCKET = "bucket"


def environment(url: str) -> dict[str, str]:
    """Environment variables that send the trainer's ``gs://`` reads and writes to ``url``."""
    return {
        "STORAGE_EMULATOR_HOST": url,  # gcsfs, google-cloud-storage
        "TENSORSTORE_GCS_HTTP_URL": url,
        "CLOUD_STORAGE_EMULATOR_ENDPOINT": url,  # array_record (google-cloud-cpp)
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # TensorStore: no credential lookup
        "EPATH_USE_TF": "false",  # epath through fsspec (gcsfs), not tf.io.gfile
        # gcsfs would ask the real Storage Control API for the bucket's layout.
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }


def _download_with_generation(request, response, storage, *args, **kwargs):
    _download(request, response, storage, *args, **kwargs)
    if response.status in (HTTPStatus.OK, HTTPStatus.PARTIAL_CONTENT):
        stored = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
        response["x-goog-generation"] = stored["generation"]
        response["x-goog-metageneration"] = stored["metageneration"]


_download = objects.download


def main(argv: list[str]) -> None:
    objects.download = _download_with_generation  # objects.get(alt=media) calls it by name
    server.HANDLERS = tuple(
        (route, {method: _download_with_generation if handler is _download else handler
                 for method, handler in methods.items()})
        for route, methods in server.HANDLERS
    )
    server.create_server("localhost", int(argv[0]), in_memory=True, default_bucket=BUCKET).run()


if __name__ == "__main__":
    main(sys.argv[1:])
