import type * as S from "./seed";
import type * as O from "./ours";

// The JSON form of a seed interface: what a board written against it reads from our output.
type Json<T> = T extends Date ? string : T extends (infer U)[] ? Json<U>[] : T extends object ? { [K in keyof T]: Json<T[K]> } : T;
type Assert<T extends true> = T;
type Is<A, B> = [A] extends [B] ? true : false;
type NoMissingKeys<Seed, Ours> = Exclude<keyof Seed, keyof Ours> extends never ? true : false;

// Shapes the seed fixes and we keep exactly: ours is one of the seed's.
export type Metadata = Assert<Is<O.EntryMetadata, Json<S.NormalizedEntryMetadata>>>;
export type CommandResult = Assert<Is<O.CommandResult, Json<S.CommandResult>>>;
export type ToolResult = Assert<Is<O.ToolResult, Json<S.ToolResult>>>;
export type ErrorInfo = Assert<Is<O.ErrorInfo, Json<S.ErrorEntry>>>;
export type Capabilities = Assert<Is<O.AgentCapabilities, Json<S.AgentCapabilities>>>;
export type Protocol = Assert<Is<O.ProtocolType, S.ProtocolType>>;
export type ProtocolBack = Assert<Is<S.ProtocolType, O.ProtocolType>>;
export type Request = Assert<Is<O.ApprovalRequestJson, Json<S.ApprovalRequest>>>;
export type Decision = Assert<Is<O.ApprovalDecision, Json<S.ApprovalDecision>>>;
export type DecisionBack = Assert<Is<S.ApprovalDecision["status"], O.ApprovalDecision["status"]>>;
export type FileRead = Assert<Is<O.FileRead, Json<Extract<S.ActionType, { kind: "file_read" }>>>>;
export type FileWrite = Assert<Is<O.FileWrite, Json<Extract<S.ActionType, { kind: "file_write" }>>>>;
export type CommandRun = Assert<Is<O.CommandRun, Json<Extract<S.ActionType, { kind: "command_run" }>>>>;
export type Search = Assert<Is<O.Search, Json<Extract<S.ActionType, { kind: "search" }>>>>;
export type Tool = Assert<Is<O.GenericTool, Json<Extract<S.ActionType, { kind: "tool" }>>>>;
export type Thinking = Assert<Is<O.Thinking, Json<Extract<S.NormalizedEntryType, { kind: "thinking" }>>>>;
export type Error = Assert<Is<O.ErrorEntry, Json<Extract<S.NormalizedEntryType, { kind: "error" }>>>>;
export type Messages = Assert<Is<O.SystemMessage | O.UserMessage | O.AssistantMessage, Json<S.NormalizedEntryType>>>;

// Shapes we grew (more entry kinds, action kinds, statuses, change types): everything the seed
// can say, ours says the same way, and apart from the grown fields ours is one of the seed's.
export type EntryKinds = Assert<Is<S.NormalizedEntryType["kind"], O.NormalizedEntryType["kind"]>>;
export type ActionKinds = Assert<Is<S.ActionType["kind"], O.ActionType["kind"]>>;
export type Statuses = Assert<Is<S.ToolUseEntry["status"], O.ToolStatus>>;
export type ChangeTypes = Assert<Is<S.FileChange["type"], O.FileChange["type"]>>;
export type Change = Assert<Is<Omit<O.FileChange, "type">, Json<Omit<S.FileChange, "type">>>>;
export type FileEdit = Assert<Is<Omit<O.FileEdit, "changes">, Json<Omit<Extract<S.ActionType, { kind: "file_edit" }>, "changes">>>>;
export type ToolUse = Assert<Is<Omit<O.ToolUseEntry, "status" | "action">, Json<Omit<S.ToolUseEntry, "status" | "action">>>>;
export type Entry = Assert<Is<Omit<O.NormalizedEntry, "type">, Json<Omit<S.NormalizedEntry, "type">>>>;
// ... and no key of the seed's is missing (an optional one would not fail the checks above).
export type Keys = Assert<NoMissingKeys<S.NormalizedEntry, O.NormalizedEntry>>
  | Assert<NoMissingKeys<S.ToolUseEntry, O.ToolUseEntry>>
  | Assert<NoMissingKeys<S.CommandResult, O.CommandResult>>
  | Assert<NoMissingKeys<S.ToolResult, O.ToolResult>>
  | Assert<NoMissingKeys<S.ErrorEntry, O.ErrorInfo>>
  | Assert<NoMissingKeys<S.FileChange, O.FileChange>>
  | Assert<NoMissingKeys<S.NormalizedEntryMetadata, O.EntryMetadata>>
  | Assert<NoMissingKeys<S.AgentCapabilities, O.AgentCapabilities>>
  | Assert<NoMissingKeys<S.ApprovalRequest, O.ApprovalRequestJson>>;
