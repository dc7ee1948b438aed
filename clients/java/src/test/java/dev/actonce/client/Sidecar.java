package dev.actonce.client;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.StatusRuntimeException;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse;
import io.grpc.health.v1.HealthGrpc;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A real {@code actonce serve} for the tests: a free loopback port, data in a temporary folder,
 * ready once its health service says SERVING.
 */
final class Sidecar implements AutoCloseable {
  /** The one rule the test sidecar's send allowlist names. */
  static final String SEND_RULE = "allowed-sender";

  /** The repository, two folders above this package's (Maven runs tests from there). */
  static final Path REPO = Path.of("..", "..").toAbsolutePath().normalize();

  final String target;
  private final Process process;
  private final Path dataDir;

  private Sidecar(String target, Process process, Path dataDir) {
    this.target = target;
    this.process = process;
    this.dataDir = dataDir;
  }

  /** Starts {@code actonce serve}, with {@code flags} added to its command line. */
  static Sidecar start(String... flags) throws IOException, InterruptedException {
    String bin = System.getenv("ACTONCE_BIN");
    if (bin == null || bin.isEmpty()) {
      bin = REPO.resolve(".venv/bin/actonce").toString();
    }
    int port;
    try (ServerSocket probe = new ServerSocket(0)) {
      port = probe.getLocalPort();
    }
    String target = "127.0.0.1:" + port;
    Path dataDir = Files.createTempDirectory("actonce-java-test-");
    Path log = dataDir.resolve("sidecar.log");
    List<String> command =
        new ArrayList<>(
            List.of(
                bin, "serve", "--listen", target, "--data-dir", dataDir.toString(),
                "--send-allowlist", SEND_RULE, "--log-format", "json", "--log-level", "warning"));
    command.addAll(List.of(flags));
    ProcessBuilder builder =
        new ProcessBuilder(command)
            .redirectErrorStream(true)
            .redirectOutput(log.toFile());
    // `actonce serve` refuses ACTONCE_* variables it does not know, and ACTONCE_BIN is this
    // harness's, not the sidecar's.
    builder.environment().remove("ACTONCE_BIN");
    Process process = builder.start();
    Sidecar sidecar = new Sidecar(target, process, dataDir);
    try {
      sidecar.waitServing(30_000);
    } catch (IllegalStateException e) {
      String output = Files.readString(log);
      sidecar.close();
      throw new IllegalStateException(e.getMessage() + "\n" + output, e);
    }
    return sidecar;
  }

  private void waitServing(long limitMillis) throws InterruptedException {
    ManagedChannel channel = ManagedChannelBuilder.forTarget(target).usePlaintext().build();
    try {
      HealthGrpc.HealthBlockingStub health = HealthGrpc.newBlockingStub(channel);
      HealthCheckRequest request =
          HealthCheckRequest.newBuilder().setService("actonce.v1.RunActionsService").build();
      long until = System.currentTimeMillis() + limitMillis;
      while (System.currentTimeMillis() < until) {
        if (!process.isAlive()) {
          throw new IllegalStateException("actonce serve exited with " + process.exitValue());
        }
        try {
          HealthCheckResponse.ServingStatus status =
              health.withDeadlineAfter(1, TimeUnit.SECONDS).check(request).getStatus();
          if (status == HealthCheckResponse.ServingStatus.SERVING) {
            return;
          }
        } catch (StatusRuntimeException notYet) {
          // Not listening yet.
        }
        Thread.sleep(100);
      }
      throw new IllegalStateException("actonce serve at " + target + " was not SERVING in time");
    } finally {
      channel.shutdownNow();
    }
  }

  @Override
  public void close() throws IOException, InterruptedException {
    process.destroyForcibly().waitFor();
    try (Stream<Path> files = Files.walk(dataDir)) {
      for (Path p : files.sorted(Comparator.reverseOrder()).toList()) {
        Files.delete(p);
      }
    }
  }
}
