package dev.actonce.client;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * One of the shared test programs of clients/testkit, run by the repository's Python: its target,
 * and a conversation line by line on its stdin and stdout. It stops when its stdin closes.
 */
final class Testkit implements AutoCloseable {
  final String target;
  private final Process process;
  private final Writer stdin;
  private final BufferedReader stdout;

  private Testkit(Process process) throws IOException {
    this.process = process;
    this.stdin = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
    this.stdout =
        new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
    String first = stdout.readLine();
    if (first == null || first.isBlank()) {
      close();
      throw new IOException("a testkit program did not start");
    }
    this.target = first.strip();
  }

  static Testkit start(String script, String... args) throws IOException {
    String python = System.getenv("ACTONCE_PYTHON");
    if (python == null || python.isEmpty()) {
      python = Sidecar.REPO.resolve(".venv/bin/python").toString();
    }
    List<String> command = new ArrayList<>(List.of(python, Sidecar.REPO.resolve("clients/testkit/" + script).toString()));
    command.addAll(List.of(args));
    return new Testkit(new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start());
  }

  /** Sends one command line and returns the program's answer. */
  String command(String line) throws IOException {
    stdin.write(line + "\n");
    stdin.flush();
    return stdout.readLine().strip();
  }

  @Override
  public void close() throws IOException {
    stdin.close();
    try {
      if (!process.waitFor(10, TimeUnit.SECONDS)) {
        process.destroyForcibly();
      }
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
    }
  }
}
