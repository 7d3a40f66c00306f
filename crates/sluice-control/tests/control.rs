//! The control plane over loopback: a task manager registers with the job master and talks
//! under its epoch; stale fences are refused both ways before any service method runs;
//! requests without the cluster's token, or with a wrong one, are refused and counted.

use sluice_control::messages::*;
use sluice_control::{
    JobMaster, JobMasterClient, JobMasterServer, ServerHandle, TaskManager, TaskManagerClient,
    TaskManagerServer, serve,
};
use sluice_net::auth::Secret;
use std::sync::Mutex;
use tonic::{Code, Status};

fn secret() -> Secret {
    Secret::new(b"the cluster's shared secret".to_vec()).unwrap()
}

/// A job master of epoch 3 that records what reached it.
#[derive(Default)]
struct Master {
    seen: Mutex<Vec<String>>,
}

impl Master {
    fn note(&self, what: String) {
        self.seen.lock().unwrap().push(what);
    }
}

impl JobMaster for Master {
    async fn register(&self, r: RegisterTaskManager) -> Result<Registered, Status> {
        self.note(format!(
            "register {} with {} slots",
            r.task_manager, r.slots
        ));
        Ok(Registered {
            fence: Some(FenceMsg {
                epoch: 3,
                attempt: 0,
            }),
            heartbeat_interval_ms: 1_000,
            heartbeat_timeout_ms: 10_000,
        })
    }
    async fn heartbeat(&self, h: Heartbeat) -> Result<Heartbeat, Status> {
        self.note(format!("heartbeat {}", h.task_manager));
        Ok(h)
    }
    async fn up(&self, u: UpMessage) -> Result<Ack, Status> {
        self.note(format!("up {:?}", u.payload));
        Ok(Ack {})
    }
}

/// A job master of epoch 3 served on a free loopback port, and its address.
async fn master_of_epoch_3() -> (ServerHandle, String) {
    let server = serve(
        "127.0.0.1:0".parse().unwrap(),
        JobMasterServer::new(Master::default(), 3),
        secret(),
    )
    .await
    .unwrap();
    let url = format!("http://{}", server.local_addr());
    (server, url)
}

fn fence(epoch: u64, attempt: u32) -> Option<FenceMsg> {
    Some(FenceMsg { epoch, attempt })
}

#[tokio::test]
async fn a_task_manager_registers_and_talks_under_the_masters_epoch() {
    let (server, url) = master_of_epoch_3().await;
    let mut client = JobMasterClient::new(&url, &secret()).unwrap();
    let registered = client
        .register(RegisterTaskManager {
            task_manager: "tm-1".into(),
            slots: 4,
            data_address: "127.0.0.1:7001".into(),
            control_address: "127.0.0.1:7002".into(),
        })
        .await
        .unwrap();
    let current = registered.fence;
    assert_eq!(current, fence(3, 0));
    let beat = Heartbeat {
        fence: current,
        task_manager: "tm-1".into(),
        job_finished: false,
    };
    assert_eq!(client.heartbeat(beat.clone()).await.unwrap(), beat);
    client
        .up(UpMessage {
            fence: current,
            task_manager: "tm-1".into(),
            payload: vec![1, 2, 3],
        })
        .await
        .unwrap();
    // A task manager still on an older job master's epoch, or sending no fence, is refused
    // before the method runs.
    let stale = client
        .heartbeat(Heartbeat {
            fence: fence(2, 9),
            task_manager: "tm-1".into(),
            job_finished: false,
        })
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::FailedPrecondition, "{stale}");
    let missing = client.up(UpMessage::default()).await.unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument, "{missing}");
    assert_eq!(server.refused(), 0);
}

#[tokio::test]
async fn messages_far_beyond_grpcs_usual_4_mib_cross() {
    // A state that travels whole (its task manager could not write it) may be tens of MiB.
    let (_server, url) = master_of_epoch_3().await;
    let mut client = JobMasterClient::new(&url, &secret()).unwrap();
    let state = vec![7u8; 40 << 20];
    client
        .up(UpMessage {
            fence: fence(3, 0),
            task_manager: "tm-1".into(),
            payload: state,
        })
        .await
        .unwrap();
    // Beyond the limit, the call fails (tonic resets the stream while encoding), not a hang.
    let too_big = client
        .up(UpMessage {
            fence: fence(3, 0),
            task_manager: "tm-1".into(),
            payload: vec![0u8; sluice_control::MAX_MESSAGE_BYTES + 1],
        })
        .await
        .unwrap_err();
    assert_ne!(too_big.code(), Code::Ok, "{too_big}");
}

/// A task manager that counts what reached it.
#[derive(Default)]
struct Worker {
    deployed: Mutex<Vec<(u64, u32)>>,
}

impl TaskManager for Worker {
    async fn deploy(&self, d: DeployTask) -> Result<Ack, Status> {
        let f = d.fence.unwrap_or_default();
        self.deployed.lock().unwrap().push((f.epoch, f.attempt));
        Ok(Ack {})
    }
    async fn cancel(&self, _: CancelTasks) -> Result<Ack, Status> {
        Ok(Ack {})
    }
    async fn heartbeat(&self, h: Heartbeat) -> Result<Heartbeat, Status> {
        Ok(h)
    }
    async fn control(&self, _: ControlMessage) -> Result<Ack, Status> {
        Ok(Ack {})
    }
}

#[tokio::test]
async fn a_task_manager_follows_the_newest_job_master_and_refuses_older_ones() {
    let worker = TaskManagerServer::new(Worker::default());
    let probe = worker.clone();
    let server = serve("127.0.0.1:0".parse().unwrap(), worker, secret())
        .await
        .unwrap();
    let url = format!("http://{}", server.local_addr());
    let mut old_master = TaskManagerClient::new(&url, &secret()).unwrap();
    let mut new_master = TaskManagerClient::new(&url, &secret()).unwrap();
    let deploy = |epoch, attempt| DeployTask {
        fence: fence(epoch, attempt),
        descriptor: vec![1, 2, 3],
    };
    old_master.deploy(deploy(1, 0)).await.unwrap();
    old_master.deploy(deploy(1, 1)).await.unwrap();
    // A new job master takes over with epoch 2: from now on epoch 1 is fenced off, whatever
    // its attempt.
    new_master.deploy(deploy(2, 0)).await.unwrap();
    let refused = old_master.deploy(deploy(1, 5)).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused}");
    let refused = old_master
        .cancel(CancelTasks {
            fence: fence(1, 1),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert_eq!(
        probe.fence(),
        Some(sluice_cluster::fencing::Fence::new(2, 0))
    );
}

#[tokio::test]
async fn requests_without_the_cluster_token_are_refused_and_counted() {
    let (server, url) = master_of_epoch_3().await;
    let wrong = Secret::new(b"somebody else's secret".to_vec()).unwrap();
    let mut intruder = JobMasterClient::new(&url, &wrong).unwrap();
    let err = intruder
        .register(RegisterTaskManager::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");

    // No token at all: a plain gRPC call.
    let channel = tonic::transport::Endpoint::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let err = grpc
        .unary(
            tonic::Request::new(RegisterTaskManager::default()),
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/sluice.control.JobMaster/Register",
            ),
            tonic_prost::ProstCodec::<RegisterTaskManager, Registered>::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    assert_eq!(server.refused(), 2);

    // With the token, a known method answers and an unknown one is refused as such.
    let mut ok = JobMasterClient::new(&url, &secret()).unwrap();
    ok.register(RegisterTaskManager::default()).await.unwrap();
    let mut request = tonic::Request::new(RegisterTaskManager::default());
    let token = format!("Bearer {}", sluice_net::auth::bearer_token(&secret()));
    request
        .metadata_mut()
        .insert("authorization", token.parse().unwrap());
    grpc.ready().await.unwrap();
    let err = grpc
        .unary(
            request,
            tonic::codegen::http::uri::PathAndQuery::from_static("/sluice.control.JobMaster/Nope"),
            tonic_prost::ProstCodec::<RegisterTaskManager, Registered>::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err}");
    // The retired methods (task reports, checkpoint acknowledgements and operator events travel
    // in `Up`) are unknown too.
    for path in [
        "/sluice.control.JobMaster/ReportTask",
        "/sluice.control.JobMaster/AcknowledgeCheckpoint",
        "/sluice.control.JobMaster/SendOperatorEvent",
    ] {
        let mut request = tonic::Request::new(RegisterTaskManager::default());
        request
            .metadata_mut()
            .insert("authorization", token.parse().unwrap());
        grpc.ready().await.unwrap();
        let err = grpc
            .unary(
                request,
                tonic::codegen::http::uri::PathAndQuery::from_static(path),
                tonic_prost::ProstCodec::<RegisterTaskManager, Registered>::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{path}: {err}");
        assert!(err.message().contains("no method"), "{path}: {err}");
    }
    assert_eq!(server.refused(), 2);
}
