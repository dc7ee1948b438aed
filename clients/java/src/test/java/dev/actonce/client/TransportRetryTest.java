package dev.actonce.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import dev.actonce.v1.BeginAttemptRequest;
import dev.actonce.v1.BeginAttemptResponse;
import dev.actonce.v1.CreateRequest;
import dev.actonce.v1.CreateResponse;
import dev.actonce.v1.RunActionsServiceGrpc;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;

/**
 * The channel's retry policy: UNAVAILABLE is retried with the same request_id.
 *
 * <p>The server here answers the first try of every create with UNAVAILABLE, as a draining
 * sidecar does. It stands in for the transport, not for the sidecar's rules, which the other
 * tests check against a real sidecar.
 */
class TransportRetryTest {
  private static final class DrainingFirst extends RunActionsServiceGrpc.RunActionsServiceImplBase {
    final List<String> tries = new CopyOnWriteArrayList<>();

    @Override
    public void beginAttempt(
        BeginAttemptRequest request, StreamObserver<BeginAttemptResponse> response) {
      response.onNext(BeginAttemptResponse.newBuilder().setAttemptId("att_1").build());
      response.onCompleted();
    }

    @Override
    public void create(CreateRequest request, StreamObserver<CreateResponse> response) {
      tries.add(request.getRequestId());
      if (tries.size() % 2 == 1) {
        response.onError(Status.UNAVAILABLE.withDescription("draining").asRuntimeException());
        return;
      }
      response.onNext(
          CreateResponse.newBuilder()
              .setId("art_1")
              .setOutcome(dev.actonce.v1.Outcome.OUTCOME_APPLIED)
              .build());
      response.onCompleted();
    }
  }

  @Test
  void unavailableIsRetriedWithTheSameRequestId() throws Exception {
    DrainingFirst draining = new DrainingFirst();
    Server server =
        NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
            .addService(draining)
            .build()
            .start();
    try (ActonceClient client =
        ActonceClient.connect("127.0.0.1:" + server.getPort(), Duration.ofSeconds(5))) {
      Attempt attempt = client.begin(Run.of("run-1", "rule", ""));
      for (int i = 0; i < 2; i++) {
        assertEquals(Outcome.APPLIED, attempt.create("ticket", "{\"n\":1}").outcome());
      }
    } finally {
      server.shutdownNow();
    }
    List<String> tries = draining.tries;
    assertEquals(4, tries.size());
    assertEquals(tries.get(0), tries.get(1));
    assertEquals(tries.get(2), tries.get(3));
    assertNotEquals(tries.get(0), tries.get(2));
  }
}
