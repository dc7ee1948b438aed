package dev.actonce.client;

import com.google.protobuf.Timestamp;
import dev.actonce.v1.AbortStepRequest;
import dev.actonce.v1.BeginStepRequest;
import dev.actonce.v1.BeginStepResponse;
import dev.actonce.v1.CreateRequest;
import dev.actonce.v1.CreateResponse;
import dev.actonce.v1.CreateThreadRequest;
import dev.actonce.v1.CreateThreadResponse;
import dev.actonce.v1.EditRequest;
import dev.actonce.v1.EditResponse;
import dev.actonce.v1.EndAttemptRequest;
import dev.actonce.v1.EndAttemptResponse;
import dev.actonce.v1.EndStepRequest;
import dev.actonce.v1.ExtendLeaseRequest;
import dev.actonce.v1.NoticeRequest;
import dev.actonce.v1.NoticeResponse;
import dev.actonce.v1.ReadRequest;
import dev.actonce.v1.ReadResponse;
import dev.actonce.v1.SendRequest;
import dev.actonce.v1.SendResponse;
import java.time.Instant;
import java.util.List;
import java.util.Objects;

/**
 * One try of a run, made by {@link ActonceClient#begin}. Thread-safe: the sidecar counts
 * identical writes, not their order.
 *
 * <p>Data, values, arguments and results are UTF-8 JSON text, as a model emits it; the sidecar
 * checks it and refuses bad JSON with INVALID_ARGUMENT.
 */
public final class Attempt {
  private final ActonceClient client;
  private final String id;
  private final String capability;
  private final Run run;
  private final DerivedIds.IdScheme idScheme;

  /** An attempt without a capability. */
  Attempt(ActonceClient client, String id, Run run, DerivedIds.IdScheme idScheme) {
    this(client, id, "", run, idScheme);
  }

  Attempt(
      ActonceClient client, String id, String capability, Run run, DerivedIds.IdScheme idScheme) {
    this.client = client;
    this.id = id;
    this.capability = Objects.requireNonNull(capability, "capability");
    this.run = run;
    this.idScheme = idScheme;
  }

  /** The sidecar's id of this attempt. */
  public String id() {
    return id;
  }

  /**
   * The attempt's capability: the secret that lets a process holding no API token make this
   * attempt's calls, and no other's, on a sidecar started with --agent-capabilities. "" when the
   * sidecar issues none. A harness hands it, with {@link #id}, to the agent process.
   */
  public String capability() {
    return capability;
  }

  /** The run this attempt belongs to. */
  public Run run() {
    return run;
  }

  /**
   * The scheme version the sidecar derives this attempt's ids with, and its scope: {@link
   * DerivedIds#deriveId(DerivedIds.IdScheme, DerivedIds.WriteType, String, String, List, int)}
   * gives the ids it will answer.
   */
  public DerivedIds.IdScheme idScheme() {
    return idScheme;
  }

  /**
   * Begins a scoped attempt ({@code run.scope()}, a tool call's id say) that belongs to this
   * attempt's delivery: its delivery attempt id is this attempt's id, and the call carries this
   * attempt's capability, which is all a sidecar with --agent-capabilities asks of it. The new
   * attempt has its own capability; a newer delivery of the run fences it, as it fences this one.
   */
  public Attempt beginScoped(Run run) {
    return client.begin(run.withDeliveryAttemptId(id), capability);
  }

  /** Makes an artifact of {@code kind} holding {@code dataJson}, or proposes it. */
  public Write create(String kind, String dataJson, WriteOption... options) {
    Options o = Options.of(options, true, true);
    CreateRequest request =
        CreateRequest.newBuilder()
            .setAttemptId(id)
            .setKind(kind)
            .setDataJson(dataJson)
            .setPropose(o.propose)
            .setRequestId(o.requestId)
            .setKey(o.key)
            .build();
    CreateResponse r = client.call(capability, s -> s.create(request), o.requestId);
    return new Write(r.getId(), Outcome.of(r.getOutcome()), r.getVersion());
  }

  /**
   * Sets {@code valueJson} at the JSON Pointer {@code path} of an artifact, or proposes it;
   * skipped when the value is already there.
   */
  public Write edit(String artifactId, String path, String valueJson, WriteOption... options) {
    Options o = Options.of(options, true, false);
    EditRequest request =
        EditRequest.newBuilder()
            .setAttemptId(id)
            .setArtifactId(artifactId)
            .setPath(path)
            .setValueJson(valueJson)
            .setPropose(o.propose)
            .setRequestId(o.requestId)
            .build();
    EditResponse r = client.call(capability, s -> s.edit(request), o.requestId);
    String written = o.propose ? r.getProposalId() : artifactId;
    return new Write(written, Outcome.of(r.getOutcome()), r.getVersion());
  }

  /** Posts a notice, which starts and steers no turn. */
  public Write notice(String threadId, String text, WriteOption... options) {
    Options o = Options.of(options, false, false);
    NoticeRequest request =
        NoticeRequest.newBuilder()
            .setAttemptId(id)
            .setThreadId(threadId)
            .setText(text)
            .setRequestId(o.requestId)
            .build();
    NoticeResponse r = client.call(capability, s -> s.notice(request), o.requestId);
    return new Write(r.getMessageId(), Outcome.of(r.getOutcome()), 0);
  }

  /**
   * Posts a message that asks for the thread's turn. Only rules on the sidecar's send allowlist
   * may send; others get a PERMANENT error with reason FORBIDDEN.
   */
  public Write send(String threadId, String text, WriteOption... options) {
    Options o = Options.of(options, false, false);
    SendRequest request =
        SendRequest.newBuilder()
            .setAttemptId(id)
            .setThreadId(threadId)
            .setText(text)
            .setRequestId(o.requestId)
            .build();
    SendResponse r = client.call(capability, s -> s.send(request), o.requestId);
    return new Write(r.getMessageId(), Outcome.of(r.getOutcome()), 0);
  }

  /** Makes a conversation thread. */
  public Write createThread(String title, WriteOption... options) {
    Options o = Options.of(options, false, true);
    CreateThreadRequest request =
        CreateThreadRequest.newBuilder()
            .setAttemptId(id)
            .setTitle(title)
            .setRequestId(o.requestId)
            .setKey(o.key)
            .build();
    CreateThreadResponse r = client.call(capability, s -> s.createThread(request), o.requestId);
    return new Write(r.getThreadId(), Outcome.of(r.getOutcome()), 0);
  }

  /** An artifact as the store holds it now. */
  public Artifact readArtifact(String artifactId) {
    ReadRequest request =
        ReadRequest.newBuilder().setAttemptId(id).setArtifactId(artifactId).build();
    dev.actonce.v1.Artifact a = client.call(capability, s -> s.read(request)).getArtifact();
    return new Artifact(a.getId(), a.getKind(), a.getVersion(), a.getDataJson(), a.getArchived());
  }

  /** A thread's messages, oldest first. */
  public List<Message> readThread(String threadId) {
    ReadRequest request = ReadRequest.newBuilder().setAttemptId(id).setThreadId(threadId).build();
    ReadResponse r = client.call(capability, s -> s.read(request));
    return r.getMessagesList().stream()
        .map(m -> new Message(m.getId(), m.getKind(), m.getText()))
        .toList();
  }

  /**
   * Declares one of the agent's own tool calls before making it. When the answer is {@link
   * Step#done}, an earlier attempt made the call: use its result. A non-idempotent call that began
   * earlier and never ended is refused with IN_DOUBT (UNKNOWN): it is never made again
   * automatically.
   */
  public Step beginStep(String tool, Effect effect, String argsJson, WriteOption... options) {
    Options o = Options.of(options, false, true);
    BeginStepRequest request =
        BeginStepRequest.newBuilder()
            .setAttemptId(id)
            .setTool(tool)
            .setEffect(effect.proto)
            .setArgsJson(argsJson)
            .setRequestId(o.requestId)
            .setKey(o.key)
            .build();
    BeginStepResponse r = client.call(capability, s -> s.beginStep(request), o.requestId);
    return new Step(r.getStepId(), Outcome.of(r.getOutcome()), r.getResultJson());
  }

  /** Records the result of a step begun with {@link #beginStep}. */
  public Outcome endStep(String stepId, String resultJson, WriteOption... options) {
    Options o = Options.of(options, false, false);
    EndStepRequest request =
        EndStepRequest.newBuilder()
            .setAttemptId(id)
            .setStepId(stepId)
            .setResultJson(resultJson)
            .setRequestId(o.requestId)
            .build();
    return Outcome.of(client.call(capability, s -> s.endStep(request), o.requestId).getOutcome());
  }

  /**
   * Declares that a step begun with {@link #beginStep} did not act: the tool refused before acting,
   * or was never called. A later try may run it, under the same step id. Only for what provably
   * did not act; an ended step cannot be aborted (STEP_ENDED), nor an aborted one ended
   * (STEP_ABORTED).
   */
  public Outcome abortStep(String stepId, String reason, WriteOption... options) {
    Options o = Options.of(options, false, false);
    AbortStepRequest request =
        AbortStepRequest.newBuilder()
            .setAttemptId(id)
            .setStepId(stepId)
            .setReason(reason)
            .setRequestId(o.requestId)
            .build();
    return Outcome.of(client.call(capability, s -> s.abortStep(request), o.requestId).getOutcome());
  }

  /** Moves the attempt's lease deadline; returns the one in force. */
  public Instant extendLease(Instant deadline) {
    ExtendLeaseRequest request =
        ExtendLeaseRequest.newBuilder()
            .setAttemptId(id)
            .setLeaseDeadline(timestamp(deadline))
            .build();
    Timestamp moved = client.call(capability, s -> s.extendLease(request)).getLeaseDeadline();
    return Instant.ofEpochSecond(moved.getSeconds(), moved.getNanos());
  }

  /** Closes the attempt; returns its writes by outcome. */
  public Counts end() {
    EndAttemptRequest request = EndAttemptRequest.newBuilder().setAttemptId(id).build();
    EndAttemptResponse r = client.call(capability, s -> s.endAttempt(request));
    return new Counts(r.getApplied(), r.getAlreadyApplied(), r.getSkipped(), r.getFailed());
  }

  static Timestamp timestamp(Instant instant) {
    return Timestamp.newBuilder()
        .setSeconds(instant.getEpochSecond())
        .setNanos(instant.getNano())
        .build();
  }

  private record Options(boolean propose, String requestId, String key) {
    static Options of(WriteOption[] options, boolean mayPropose, boolean mayKey) {
      boolean propose = false;
      // One id per call; the channel's own retries resend the same request.
      String requestId = ActonceClient.newRequestId();
      String key = "";
      for (WriteOption option : options) {
        if (option instanceof WriteOption.RequestId given) {
          requestId = given.id();
        } else if (option instanceof WriteOption.Key given) {
          if (!mayKey) {
            throw new IllegalArgumentException(
                "a key applies to create, createThread and beginStep only");
          }
          key = given.key();
        } else if (mayPropose) {
          propose = true;
        } else {
          throw new IllegalArgumentException("propose applies to create and edit only");
        }
      }
      return new Options(propose, requestId, key);
    }
  }
}
