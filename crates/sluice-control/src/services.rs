//! The two services of the control plane: the job master's (task managers call it) and the
//! task managers' (the job master calls it).

use crate::messages::*;
use crate::service::control_service;

control_service! {
    /// What the job master answers (task managers call it): registration, heartbeats, and what
    /// the tasks send up, in order (checkpoint reports with their state, coordinator events,
    /// task ends). Requests other than a registration must carry the job master's epoch; the
    /// server refuses others before the method runs.
    service JobMaster as "sluice.control.JobMaster", server JobMasterServer, client JobMasterClient {
        /// A task manager offers its slots; the answer carries the fence to use.
        fn register(RegisterTaskManager) -> Registered = "/sluice.control.JobMaster/Register";
        /// A task manager is alive.
        fn heartbeat(Heartbeat) -> Heartbeat = "/sluice.control.JobMaster/Heartbeat";
        /// What a task manager's tasks send, in order (reports, events, task ends).
        fn up(UpMessage) -> Ack = "/sluice.control.JobMaster/Up";
    }
}

control_service! {
    /// What a task manager answers (the job master calls it): deployment, one task's mailbox
    /// messages (checkpoint triggers, notices, coordinator events), cancellation and
    /// heartbeats. The server
    /// keeps the newest fence it has seen and refuses older ones, so a deposed job master or a
    /// failed attempt can no longer act.
    service TaskManager as "sluice.control.TaskManager", server TaskManagerServer, client TaskManagerClient {
        /// Run this task manager's part of a deployment.
        fn deploy(DeployTask) -> Ack = "/sluice.control.TaskManager/Deploy";
        /// Stop every task of an attempt.
        fn cancel(CancelTasks) -> Ack = "/sluice.control.TaskManager/Cancel";
        /// The job master is alive.
        fn heartbeat(Heartbeat) -> Heartbeat = "/sluice.control.TaskManager/Heartbeat";
        /// One message for one task's mailbox.
        fn control(ControlMessage) -> Ack = "/sluice.control.TaskManager/Control";
    }
}

impl<T> JobMasterServer<T> {
    /// A server for `service`, the job master of `epoch`.
    pub fn new(service: T, epoch: u64) -> Self {
        JobMasterServer {
            inner: std::sync::Arc::new(service),
            fences: std::sync::Arc::new(crate::service::FencePolicy::Epoch(epoch)),
        }
    }
}

impl<T> TaskManagerServer<T> {
    /// A server for `service`, accepting the newest fence it sees.
    pub fn new(service: T) -> Self {
        TaskManagerServer {
            inner: std::sync::Arc::new(service),
            fences: std::sync::Arc::new(crate::service::FencePolicy::Newest(Default::default())),
        }
    }

    /// The newest fence this task manager has accepted.
    pub fn fence(&self) -> Option<sluice_cluster::fencing::Fence> {
        self.fences.current()
    }
}
