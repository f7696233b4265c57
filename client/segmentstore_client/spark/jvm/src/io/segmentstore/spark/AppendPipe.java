// One writer's appends to one segment over one WireClient, pipelined: events are sent
// without waiting for their DataAppended while the bytes in flight stay under
// MAX_IN_FLIGHT (then the oldest acknowledgement is awaited first), as the SDK's writer
// bounds its outstanding appends. The server answers a writer's appends in order, so
// acknowledgements are matched to requests first in, first out; each must name the event
// number it was sent with (an acknowledgement of a duplicate the server already held
// names the same number). Every wait is bounded by the client's timeout.
package io.segmentstore.spark;

import java.io.IOException;
import java.util.ArrayDeque;
import java.util.UUID;

final class AppendPipe {
  static final long MAX_IN_FLIGHT = 16L * 1024 * 1024;
  // Also a count: acknowledgements are read only when the bound is met, so tiny events
  // must not leave more of them unread than the sockets' buffers hold (4,096 x 56 bytes).
  static final int MAX_APPENDS_IN_FLIGHT = 4096;

  private final WireClient client;
  private final UUID writer;
  private final String segment;
  private final ArrayDeque<long[]> inFlight = new ArrayDeque<>(); // {request id, number, bytes}
  private long bytesInFlight;
  private long lastAcked;

  /** Sets up the append session; {@link #held} is what the server already holds. */
  AppendPipe(WireClient client, UUID writer, String segment) throws IOException {
    this.client = client;
    this.writer = writer;
    this.segment = segment;
    this.lastAcked = Math.max(0, client.setupAppend(writer, segment));
  }

  /** The last event number the server held for this writer at setup (0: none). */
  long held() {
    return lastAcked;
  }

  void append(byte[] record, long eventNumber) throws IOException {
    while (!inFlight.isEmpty()
        && (bytesInFlight + record.length > MAX_IN_FLIGHT
            || inFlight.size() >= MAX_APPENDS_IN_FLIGHT)) {
      ackOne();
    }
    long id = client.sendAppend(writer, segment, record, eventNumber);
    inFlight.add(new long[] {id, eventNumber, record.length});
    bytesInFlight += record.length;
  }

  /** Waits for every acknowledgement; returns the last acknowledged event number. */
  long drain() throws IOException {
    while (!inFlight.isEmpty()) {
      ackOne();
    }
    return lastAcked;
  }

  private void ackOne() throws IOException {
    long[] sent = inFlight.poll();
    long number = client.appended(writer, segment, sent[0]);
    if (number != sent[1]) {
      throw new IOException(
          "segmentstore-jvm: " + client.endpointName() + " acknowledged event number " + number
              + " for event " + sent[1] + " (segment '" + segment + "', writer " + writer + ")");
    }
    bytesInFlight -= sent[2];
    lastAcked = number;
  }
}
