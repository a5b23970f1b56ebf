// The parts of the denobridge TypeScript library (JSR `@brad-jones/terraform-provider-denobridge`
// 0.4.1) that decide what goes over the wire, written again here because JSR is not one of the
// registries these tests may use. Each piece says which upstream file it follows; the wire
// behaviour is kept byte for byte: the line splitting of `@std/streams` TextLineStream, the
// concurrent per-line handling of `lib/jsocket.ts` (a line that does not parse gets
// `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error","data":...}}`), the
// request routing and response layout of `@yieldray/json-rpc-ts` 0.2 `JSONRPCServer`, and the
// `health`/`shutdown` methods and stderr banner of `lib/providers/base.ts`.

// deno-lint-ignore-file no-explicit-any

/** `@std/streams` TextLineStream (allowCR false): split on `\n`, drop a `\r` before it. */
class TextLineStream extends TransformStream<string, string> {
  #currentLine = "";

  constructor() {
    super({
      transform: (chars, controller) => {
        chars = this.#currentLine + chars;
        while (true) {
          const lfIndex = chars.indexOf("\n");
          if (lfIndex === -1) break;
          const endIndex = chars[lfIndex - 1] === "\r" ? lfIndex - 1 : lfIndex;
          controller.enqueue(chars.slice(0, endIndex));
          chars = chars.slice(lfIndex + 1);
        }
        this.#currentLine = chars;
      },
      flush: (controller) => {
        if (this.#currentLine === "") return;
        controller.enqueue(this.#currentLine);
      },
    });
  }
}

/** `@yieldray/json-rpc-ts` JSONRPCError and the standard codes. */
export class JSONRPCError extends Error {
  constructor(public code: number, message: string, public data?: unknown) {
    super(message);
  }
}
export class JSONRPCMethodNotFoundError extends JSONRPCError {
  constructor(data?: unknown) {
    super(-32601, "Method not found", data);
  }
}

function isJSONRPCID(x: unknown): boolean {
  return typeof x === "string" || (typeof x === "number" && Number.isInteger(x)) || x === null;
}

function isJSONRPCError(x: any): boolean {
  return !!x && typeof x === "object" && typeof x.code === "number" && typeof x.message === "string";
}

function success(id: unknown, result: unknown): string {
  return JSON.stringify({ jsonrpc: "2.0", id, result });
}

function failure(id: unknown, error: { code: number; message: string; data?: unknown }): string {
  return JSON.stringify({
    jsonrpc: "2.0",
    id,
    error: { code: error.code, data: error.data, message: error.message },
  });
}

type Methods = Record<string, (params: any) => unknown>;

/** `@yieldray/json-rpc-ts` JSONRPCServer.handleRequest: a JSON text in, a response text out. */
class JSONRPCServer {
  constructor(private methods: Methods) {}

  async handleRequest(input: string): Promise<string> {
    let value: unknown;
    try {
      value = JSON.parse(input);
    } catch {
      return failure(null, { code: -32700, message: "Parse error" });
    }
    if (Array.isArray(value)) {
      if (value.length === 0) return failure(null, { code: -32600, message: "Invalid Request" });
      if (value.every((r) => !("id" in r))) {
        Promise.allSettled(value.map((r) => this.#single(r)));
        return "";
      }
      const out: string[] = [];
      for (const v of value) {
        const r = await this.#singleValue(v);
        if (r) out.push(r);
      }
      return `[${out.join(",")}]`;
    }
    return (await this.#singleValue(value)) ?? "";
  }

  async #singleValue(value: any): Promise<string | undefined> {
    if (
      value && typeof value === "object" && value.jsonrpc === "2.0" &&
      typeof value.method === "string" && (!("id" in value) || isJSONRPCID(value.id))
    ) {
      return await this.#single(value);
    }
    if (value && typeof value === "object" && "id" in value && isJSONRPCID(value.id)) {
      return failure(value.id, { code: -32600, message: "Invalid Request" });
    }
    return failure(null, { code: -32600, message: "Invalid Request" });
  }

  async #single(request: any): Promise<string | undefined> {
    const prop = this.methods[request.method];
    const fn = typeof prop === "function"
      ? prop.bind(this.methods)
      : () => {
        throw new JSONRPCMethodNotFoundError();
      };
    if ("id" in request) {
      try {
        return success(request.id, await fn(request.params));
      } catch (error) {
        return failure(
          request.id,
          isJSONRPCError(error) ? error as any : { code: -32603, message: "Internal error" },
        );
      }
    }
    try {
      await fn(request.params);
    } catch {
      // a notification gets no answer, not even an error
    }
  }
}

/** `lib/jsocket.ts` JSocket, server half: every line is handled as its own job. */
class JSocket {
  readonly server: JSONRPCServer;
  readonly #listener: Promise<void>;
  #running = false;
  #writeQueue = Promise.resolve();

  constructor(methods: Methods, readonly debugLogging: boolean) {
    this.server = new JSONRPCServer(methods);
    this.#listener = (async () => {
      const jobs = new Map<Promise<void>, boolean>();
      this.#running = true;
      const reader = Deno.stdin.readable
        .pipeThrough(new TextDecoderStream())
        .pipeThrough(new TextLineStream())
        .getReader();
      try {
        while (this.#running) {
          const { value, done } = await reader.read();
          if (done) break;
          if (value) {
            this.#log(`Rx: ${value}`);
            const job = this.#serverHandler(value);
            jobs.set(job, true);
            job.then(() => jobs.delete(job));
          }
        }
      } finally {
        reader.releaseLock();
      }
      await Promise.all(jobs.keys());
    })();
  }

  async tx(line: string): Promise<void> {
    this.#writeQueue = this.#writeQueue.then(async () => {
      const w = Deno.stdout.writable.getWriter();
      await w.ready;
      try {
        await w.write(new TextEncoder().encode(`${line}\n`));
        this.#log(`Tx: ${line}`);
      } finally {
        w.releaseLock();
      }
    });
    await this.#writeQueue;
  }

  #log(msg: string) {
    if (this.debugLogging) console.error(msg);
  }

  async #serverHandler(line: string) {
    if (line.trim() === "") return;
    try {
      const message = JSON.parse(line);
      if (
        message.jsonrpc === "2.0" && message.id !== undefined &&
        (message.result !== undefined || message.error !== undefined)
      ) {
        // A response to a request of ours: this provider sends none, so none is awaited.
        this.#log(`WARN: response (#${message.id}) received without a matching waiter`);
        return;
      }
      const response = await this.server.handleRequest(line);
      if (response && response.length > 0) await this.tx(response);
    } catch (error) {
      this.#log(`Error processing request: ${error}`);
      await this.tx(JSON.stringify({
        jsonrpc: "2.0",
        id: null,
        error: { code: -32700, message: "Parse error", data: String(error) },
      }));
    }
  }

  async dispose(): Promise<void> {
    this.#running = false;
    Deno.stdin.close();
    await this.#listener;
  }
}

/** `lib/providers/base.ts` + `resource.ts`: a resource provider on stdin/stdout. */
export type ResourceMethods<P, S> = {
  create(props: P): Promise<{ id: string; state: S }>;
  read(id: string, props: P | null): Promise<{ props: P; state: S } | { exists: false }>;
  update(id: string, nextProps: P, currentProps: P, currentState: S): Promise<S>;
  delete(id: string, props: P, state: S): Promise<void>;
};

export class ResourceProvider<P, S> {
  constructor(provider: ResourceMethods<P, S>) {
    console.error(
      "This is a JSON-RPC 2.0 server for the denobridge terraform provider. see: https://github.com/brad-jones/terraform-provider-denobridge",
    );
    let debugLogging = false;
    try {
      debugLogging = Deno.env.get("TF_LOG")?.toLowerCase() === "debug";
    } catch {
      // no permission to read the environment
    }
    const methods: Methods = {
      async create(params: any) {
        const result: any = await provider.create({ ...params.props, writeOnly: params.writeOnlyProps });
        return { id: result.id, state: result.state, sensitiveState: undefined };
      },
      async read(params: any) {
        const result: any = await provider.read(params.id, params.props);
        if ("exists" in result) return result;
        return { props: result.props, state: result.state, sensitiveState: undefined };
      },
      async update(params: any) {
        const state = await provider.update(
          params.id,
          { ...params.nextProps, writeOnly: params.nextWriteOnlyProps },
          params.currentProps,
          { ...params.currentState, sensitive: params.currentSensitiveState },
        );
        return { state, sensitiveState: undefined };
      },
      async delete(params: any) {
        await provider.delete(params.id, params.props, { ...params.state, sensitive: params.sensitiveState });
        return { done: true };
      },
      modifyPlan() {
        throw new JSONRPCMethodNotFoundError();
      },
      health() {
        return { ok: true };
      },
      shutdown() {
        console.error("Shutting down gracefully...");
        socket.dispose();
      },
    };
    // `wrapMethods`: an error that is not a JSON-RPC error is logged on stderr, then answered
    // by the server as a bare -32603 (the detail stays on stderr).
    for (const [name, fn] of Object.entries(methods)) {
      methods[name] = async (arg: unknown) => {
        try {
          return await fn.call(methods, arg);
        } catch (e) {
          if (!(e instanceof JSONRPCError)) console.error("uncaught error", e);
          throw e;
        }
      };
    }
    const socket = new JSocket(methods, debugLogging);
  }
}
