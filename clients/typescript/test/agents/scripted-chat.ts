/**
 * A LangChain chat model scripted as a real one answers (see scripted.ts): a module of its
 * own, so that a project outside the repository can take it beside its own @langchain/core.
 */
import { randomUUID } from "node:crypto";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, type BaseMessage, isAIMessage } from "@langchain/core/messages";
import type { ChatResult } from "@langchain/core/outputs";

/** (tool, arguments) each, as scripted.ts's Turn. */
type Turn = [string, Record<string, unknown>][];

/** A chat model answering `script` as `scriptedModel` does: answer n after n AI messages,
 * tool calls named anew and shuffled on every call; the process kills itself as its
 * `killAtCall`-th call starts. */
export class ScriptedChatModel extends BaseChatModel {
  calls = 0;

  constructor(
    readonly script: Turn[],
    readonly killAtCall = 0,
  ) {
    super({});
  }

  _llmType(): string {
    return "scripted";
  }

  async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    this.calls++;
    if (this.calls === this.killAtCall) process.kill(process.pid, "SIGKILL");
    const turn = [...(this.script[messages.filter((m) => isAIMessage(m)).length] ?? [])];
    for (let i = turn.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [turn[i], turn[j]] = [turn[j]!, turn[i]!];
    }
    const pick = (v: unknown) => (Array.isArray(v) ? v[Math.floor(Math.random() * v.length)] : v);
    const tool_calls = turn.map(([name, args]) => ({
      id: `call_${randomUUID().slice(0, 12)}`,
      name,
      args: Object.fromEntries(Object.entries(args).map(([k, v]) => [k, pick(v)])),
      type: "tool_call" as const,
    }));
    const message = new AIMessage({ content: tool_calls.length > 0 ? "" : "done", tool_calls });
    return { generations: [{ message, text: String(message.content) }] };
  }

  override bindTools(): this {
    return this;
  }
}
