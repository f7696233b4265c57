"""Generated gRPC stubs of the controller interface (``controller.proto``).

Contract: ``controller_pb2`` and ``controller_pb2_grpc`` are produced by ``scripts/gen_proto``
and committed; never edit them by hand. Importing this package needs ``grpcio`` and
``protobuf`` (the ``streams`` extra of the SDK, included in ``server``); the SDK imports it
lazily so that ``import segmentstore_client`` works without them.
"""
