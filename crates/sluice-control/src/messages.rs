//! The control plane's messages (protobuf, through `prost`'s derive: no `.proto` compiler at
//! build time). Runtime-specific content (a deployment, a task's mailbox message, what tasks
//! send up: reports, checkpoint acknowledgements, operator events, task ends) travels as opaque
//! bytes the runtime encodes; everything the control plane itself decides on (fences, task
//! managers, slots, heartbeats, which tasks to cancel) is typed.

use sluice_cluster::fencing::Fence;

/// A [`Fence`] on the wire.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct FenceMsg {
    /// The job master's epoch.
    #[prost(uint64, tag = "1")]
    pub epoch: u64,
    /// The job's attempt.
    #[prost(uint32, tag = "2")]
    pub attempt: u32,
}

impl From<Fence> for FenceMsg {
    fn from(f: Fence) -> Self {
        FenceMsg {
            epoch: f.epoch,
            attempt: f.attempt,
        }
    }
}

impl From<FenceMsg> for Fence {
    fn from(f: FenceMsg) -> Self {
        Fence::new(f.epoch, f.attempt)
    }
}

/// A task manager offers its slots (task manager → job master).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterTaskManager {
    /// The task manager's name, unique in the cluster.
    #[prost(string, tag = "1")]
    pub task_manager: String,
    /// How many subtasks it runs at once.
    #[prost(uint32, tag = "2")]
    pub slots: u32,
    /// Where its data plane listens (`host:port`).
    #[prost(string, tag = "3")]
    pub data_address: String,
    /// Where its control service listens (`host:port`).
    #[prost(string, tag = "4")]
    pub control_address: String,
}

/// The job master's answer to a registration.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Registered {
    /// The job master's current fence: the task manager adopts it.
    #[prost(message, optional, tag = "1")]
    pub fence: Option<FenceMsg>,
    /// How often to send heartbeats, in milliseconds.
    #[prost(uint64, tag = "2")]
    pub heartbeat_interval_ms: u64,
    /// After how long without a heartbeat either side declares the other lost.
    #[prost(uint64, tag = "3")]
    pub heartbeat_timeout_ms: u64,
}

/// A heartbeat, either way.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Heartbeat {
    /// The sender's fence.
    #[prost(message, optional, tag = "1")]
    pub fence: Option<FenceMsg>,
    /// The task manager it comes from or goes to.
    #[prost(string, tag = "2")]
    pub task_manager: String,
    /// From the job master: the job ended, the task manager may shut down.
    #[prost(bool, tag = "3")]
    pub job_finished: bool,
}

/// Run a task manager's part of a deployment (job master → task manager).
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeployTask {
    /// The attempt.
    #[prost(message, optional, tag = "1")]
    pub fence: Option<FenceMsg>,
    /// What to run and where its inputs and outputs are, as the runtime encoded it (tag 2, a
    /// task id, is retired: a deployment names its tasks itself).
    #[prost(bytes = "vec", tag = "3")]
    pub descriptor: Vec<u8>,
}

/// Stop the tasks of an attempt (job master → task manager).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CancelTasks {
    /// The attempt whose tasks stop.
    #[prost(message, optional, tag = "1")]
    pub fence: Option<FenceMsg>,
    /// The tasks (every task of the attempt when empty), numbered as the runtime numbers them.
    #[prost(uint64, repeated, tag = "2")]
    pub tasks: Vec<u64>,
    /// The attempt of those tasks (a region restarted alone runs a newer attempt than the
    /// rest of the job, so this is not the fence's).
    #[prost(uint32, tag = "3")]
    pub attempt: u32,
}

/// What tasks on a task manager send to the job master, in the order they sent it: checkpoint
/// acknowledgements with their state, declines, "finished input", events to coordinators
/// and task ends, as the runtime encoded them (task manager → job master).
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpMessage {
    /// The job master's epoch the tasks run under.
    #[prost(message, optional, tag = "1")]
    pub fence: Option<FenceMsg>,
    /// The sending task manager.
    #[prost(string, tag = "2")]
    pub task_manager: String,
    /// The runtime's message.
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
}

/// One message to one task's mailbox (checkpoint trigger, completion or abort notice,
/// operator event from a coordinator, finish), as the runtime encoded it (job master → task
/// manager). Messages to a task arrive in the order its mailbox received them.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ControlMessage {
    /// The job master's epoch.
    #[prost(message, optional, tag = "1")]
    pub fence: Option<FenceMsg>,
    /// The runtime's message.
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// An answer with nothing in it.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Ack {}

/// Messages that carry a fence.
pub trait Fenced {
    /// Whether a message of this type must carry one (all but a registration).
    const FENCED: bool = true;
    /// The fence, if the sender set one.
    fn fence(&self) -> Option<Fence>;
}

impl Fenced for RegisterTaskManager {
    const FENCED: bool = false;
    fn fence(&self) -> Option<Fence> {
        None
    }
}

macro_rules! fenced {
    ($($t:ty),*) => {
        $(impl Fenced for $t {
            fn fence(&self) -> Option<Fence> {
                self.fence.map(Fence::from)
            }
        })*
    };
}

fenced!(
    Heartbeat,
    DeployTask,
    CancelTasks,
    UpMessage,
    ControlMessage
);
