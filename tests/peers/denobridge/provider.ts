// A denobridge resource provider as a Terraform user writes one, on the library stand-in in
// ./denobridge.ts. The Go provider runs it as `deno run -q /abs/path/provider.ts`.
//
// Resources live in memory: `create` stores the props and returns their size as state,
// `read` gives them back (or `{exists:false}`), `update` replaces them, `delete` forgets them.
// `create` with `{"fail": true}` throws, which the library answers as a bare -32603.

import { ResourceProvider } from "./denobridge.ts";

type Props = { name?: string; content?: string; fail?: boolean };
type State = { size: number; content?: string };

const resources = new Map<string, Props>();
let next = 1;

function stateOf(props: Props): State {
  return { size: (props.content ?? "").length, content: props.content };
}

new ResourceProvider<Props, State>({
  async create(props) {
    if (props.fail) throw new Error(`refusing to create ${props.name}`);
    const id = `r${next++}`;
    resources.set(id, props);
    return { id, state: stateOf(props) };
  },
  async read(id) {
    const props = resources.get(id);
    if (!props) return { exists: false };
    return { props, state: stateOf(props) };
  },
  async update(id, nextProps) {
    resources.set(id, nextProps);
    return stateOf(nextProps);
  },
  async delete(id) {
    resources.delete(id);
  },
});
